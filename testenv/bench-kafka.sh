#!/usr/bin/env bash
# make bench-kafka: dsbench's real-cluster mode on three Apache Kafka brokers in a
# network namespace (testenv/kafka.sh netns mode), with and without round trips of
# KAFKA_RTT_US (default 1000) microseconds, the job pinned to other cores than the
# brokers.
#
# Measured on the same stream, interleaved rep by rep: Kafka's ProducerPerformance
# (transactional, 1 MiB batches, acks=all) and ConsumerPerformance (read_committed)
# from the broker's own jars, the copy job and dedupstream; each through the relay
# without delay ("relay") and with it ("rtt"). Results: $BENCHOUT (default
# bench/results/kafka): results.json, results.md, throughput.svg.
#
# A netns cluster that already runs is used and left running; otherwise one is
# started and stopped again, namespace included, however this script ends.
# Environment: KAFKA_PORT_BASE, KAFKA_RTT_US, KAFKA_CPUS (brokers' cores, default
# the last), JOB_CPUS (dsbench's, default all but the last), RECORDS (default 400k),
# REPS (default 3), PARTITIONS (default 4), JOB_PROCESS (default 1: dedupstream and
# the copy job each run in a process of their own on JOB_CPUS, so job CPU us/record is
# the job's alone; 0 runs them inside dsbench), BENCHFLAGS (more dsbench flags), ARMS
# (dsbench -arms instead of the default ones; routes "relay" and "rtt", e.g.
# "copy-job=copy-job@relay;dedupstream serial=dedupstream@relay,inflight=1,ahead=false").
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
kafka=$repo/testenv/kafka.sh
out=${BENCHOUT:-$repo/bench/results/kafka}
last=$(($(nproc) - 1))
export KAFKA_CPUS=${KAFKA_CPUS:-$last}
job_cpus=${JOB_CPUS:-0-$((last > 0 ? last - 1 : 0))}

started=
cleanup() {
	if [[ -n $started ]]; then "$kafka" stop || "$kafka" net-down; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! "$kafka" ready >/dev/null 2>&1 || ! "$kafka" brokers relay >/dev/null 2>&1; then
	if "$kafka" ready >/dev/null 2>&1; then
		echo "bench-kafka: a cluster without netns mode runs on this port base; stop it first ($kafka stop)" >&2
		exit 1
	fi
	started=1
	KAFKA_NET=netns "$kafka" start 3
fi
relay=$("$kafka" brokers relay)
rtt=$("$kafka" brokers delayed)
label="rtt${KAFKA_RTT_US:-1000}us"
arms="producer-perf=producer-perf@relay;consumer-perf=consumer-perf@relay;copy-job=copy-job@relay;dedupstream=dedupstream@relay"
arms+=";producer-perf $label=producer-perf@rtt;consumer-perf $label=consumer-perf@rtt;copy-job $label=copy-job@rtt;dedupstream $label=dedupstream@rtt"
arms=${ARMS:-$arms}
cd "$repo"
go build -o "$repo/bin/dsbench" ./bench/cmd/dsbench
procflags=()
if [[ ${JOB_PROCESS:-1} == 1 ]]; then procflags=(-job-process -job-cpus "$job_cpus"); fi
# shellcheck disable=SC2086
taskset -c "$job_cpus" "$repo/bin/dsbench" -modes kafka -e2e-records "${RECORDS:-400k}" -reps "${REPS:-3}" \
	-partitions "${PARTITIONS:-4}" -routes "relay=$relay;rtt=$rtt" -arms "$arms" \
	-broker-pids "$("$kafka" pids)" -kafka-lib "${KAFKA_HOME:-$repo/.kafka}/lib" -out "$out" "${procflags[@]}" ${BENCHFLAGS:-}
