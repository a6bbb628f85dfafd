#!/usr/bin/env bash
# A real Apache Kafka cluster on loopback for `make test-kafka` and `make chaos`.
#
#   testenv/kafka.sh start 1|3        format KRaft storage and start 1 or 3 nodes, wait until ready
#   testenv/kafka.sh stop             stop every node cleanly (SIGTERM, then SIGKILL after 60s)
#   testenv/kafka.sh bounce N [--kill] stop node N cleanly (or SIGKILL it), restart it and wait
#                                     until it is back in the ISR of every partition it replicates
#   testenv/kafka.sh status           one line per node: id, address, pid, running or not
#   testenv/kafka.sh brokers [direct|relay|delayed]
#                                     the bootstrap list, host:port comma-separated; in netns
#                                     mode also through the relay with or without the delay
#   testenv/kafka.sh pids             the nodes' process ids, comma-separated (for CPU accounting)
#   testenv/kafka.sh net-down         remove the namespace, veth pair and relay of netns mode
#   testenv/kafka.sh ready            exit 0 if every node answers metadata, else say what is wrong
#   testenv/kafka.sh fetch            only fetch the jars (start does it when needed)
#
# Each node is a combined broker and controller (process.roles=broker,controller);
# the three controllers form a static quorum, so any one node can be bounced.
# The jars come from testenv/kafka/pom.xml through Maven into .kafka/lib (fetched
# once, again when the pom changes); data and logs live in .kafka/data/node-N.
# Environment: KAFKA_HOME (default <repo>/.kafka), KAFKA_PORT_BASE (default
# 29090: node N listens on base+N for clients, base+100+N for the quorum),
# KAFKA_HEAP (default 512m), KAFKA_PROPS (broker properties added at start, one
# key=value per line or separated by spaces, overriding the defaults below; e.g.
# "num.network.threads=1 num.io.threads=2" for a starved core).
#
# Placement on loopback: KAFKA_CPUS=LIST at start pins every node (and each
# later bounce of one) with taskset -c LIST, so a job pinned elsewhere
# (dsbench -job-cpus) and the brokers do not share cores; unset, the nodes
# run wherever the scheduler puts them. On this two-core machine
# KAFKA_CPUS=1 with the job on core 0 is the "job on its own core" placement
# of the latency target; the brokers then have one core for three JVMs
# (docs/benchmarks.md, "Latency decomposition, session 10", says what that
# costs). The placement is kept in .kafka/data/cpus and shown by status.
#
# Netns mode (KAFKA_NET=netns at start; root, ip, taskset and go needed): the
# brokers run in a network namespace "dsk<base>" behind a veth pair with
# private addresses 10.A.B.1 (this side) and 10.A.B.2 (the brokers' side),
# A.B derived from the port base, pinned with taskset to KAFKA_CPUS (default
# the last core). Clients reach them three ways ("brokers direct|relay|delayed"):
# direct through the veth (base+N), through the relay netdelay without delay
# (base+40+N) and through it with KAFKA_RTT_US microseconds of round trip
# (default 1000; half each way, base+20+N). The relay runs on the brokers' cores,
# so relay and delayed differ by the delay alone. The kernel's tc netem would be
# the natural delay, but kernels built without sch_netem (and sch_fq) are common
# in VMs; netdelay (testenv/netdelay) works on any. Replication between the
# brokers stays inside the namespace, undelayed. stop (and a start that fails)
# removes the namespace, the veth pair and the relay; net-down does it alone.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
home=${KAFKA_HOME:-$repo/.kafka}
lib=$home/lib
data=$home/data
base=${KAFKA_PORT_BASE:-29090}
heap=${KAFKA_HEAP:-512m}
pom=$repo/testenv/kafka/pom.xml
ns=dsk$base
veth=dsk${base}h
ip_a=$((base / 256 % 256))
ip_b=$((base % 256 / 4 * 4))
host_ip=10.$ip_a.$ip_b.1
ns_ip=10.$ip_a.$ip_b.2
rtt_us=${KAFKA_RTT_US:-1000}
cpus=${KAFKA_CPUS:-$(($(nproc) - 1))}

die() { echo "kafka.sh: $*" >&2; exit 1; }
log() { echo "kafka.sh: $*" >&2; }

client_port() { echo $((base + $1)); }
quorum_port() { echo $((base + 100 + $1)); }
delayed_port() { echo $((base + 20 + $1)); }
relay_port() { echo $((base + 40 + $1)); }

# netns says whether the last started cluster runs in the namespace.
netns() { [[ $(cat "$data/net" 2>/dev/null) == netns ]]; }

# node_ip is the address the nodes listen on.
node_ip() { if netns; then echo "$ns_ip"; else echo 127.0.0.1; fi; }

# nodes prints the node ids of the cluster that was last started.
nodes() {
	[[ -f $data/nodes ]] || die "no cluster: run '$0 start 1|3' first"
	seq 1 "$(cat "$data/nodes")"
}

brokers() {
	local via=${1:-direct} list=() n
	[[ $via == direct ]] || netns || die "brokers $via: only in netns mode (KAFKA_NET=netns $0 start 3)"
	for n in $(nodes); do
		case $via in
		direct) list+=("$(node_ip):$(client_port "$n")") ;;
		relay) list+=("$host_ip:$(relay_port "$n")") ;;
		delayed) list+=("$host_ip:$(delayed_port "$n")") ;;
		*) die "usage: $0 brokers [direct|relay|delayed]" ;;
		esac
	done
	(IFS=,; echo "${list[*]}")
}

# net_up makes the namespace, the veth pair and the relay of netns mode.
net_up() {
	[[ $(id -u) == 0 ]] || die "netns mode needs root (ip netns, veth)"
	command -v taskset >/dev/null || die "netns mode needs taskset (util-linux)"
	net_down
	log "namespace $ns: $host_ip <-> $ns_ip, relay round trip ${rtt_us}us, brokers on cpus $cpus"
	ip netns add "$ns"
	ip link add "$veth" type veth peer name "${veth%h}n"
	ip link set "${veth%h}n" netns "$ns"
	ip addr add "$host_ip/30" dev "$veth"
	ip link set "$veth" up
	ip -n "$ns" addr add "$ns_ip/30" dev "${veth%h}n"
	ip -n "$ns" link set "${veth%h}n" up
	ip -n "$ns" link set lo up
	mkdir -p "$home/bin"
	(cd "$repo" && go build -o "$home/bin/netdelay" ./testenv/netdelay) || die "cannot build testenv/netdelay"
}

# relay_up starts the relay once the node count is known.
relay_up() {
	local count=$1 n routes=()
	for n in $(seq 1 "$count"); do
		routes+=(-route "$host_ip:$(relay_port "$n")=$ns_ip:$(relay_port "$n")@0s")
		routes+=(-route "$host_ip:$(delayed_port "$n")=$ns_ip:$(delayed_port "$n")@$((rtt_us / 2))us")
	done
	setsid taskset -c "$cpus" "$home/bin/netdelay" "${routes[@]}" >"$data/netdelay.log" 2>&1 </dev/null &
	echo $! >"$data/netdelay.pid"
}

# net_down removes what net_up made; it is safe to run when nothing is there.
net_down() {
	local pid
	pid=$(cat "$data/netdelay.pid" 2>/dev/null || true)
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in 1 2 3 4 5; do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$data/netdelay.pid"
	if ip link show "$veth" >/dev/null 2>&1; then ip link del "$veth"; fi
	if ip netns list 2>/dev/null | grep -qx "$ns\( .*\)\?"; then ip netns del "$ns"; fi
	return 0
}

# fetch_jars copies the broker's jars from Maven once per pom version.
fetch_jars() {
	local sum
	sum=$(sha256sum "$pom" | cut -d' ' -f1)
	if [[ -f $lib/.pom.sha256 && $(cat "$lib/.pom.sha256") == "$sum" ]]; then
		return
	fi
	log "fetching the broker jars named by $pom"
	rm -rf "$lib.tmp"
	mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$lib.tmp"
	rm -rf "$lib"
	mv "$lib.tmp" "$lib"
	echo "$sum" >"$lib/.pom.sha256"
}

pid_of() { cat "$data/node-$1/pid" 2>/dev/null || true; }

running() {
	local pid
	pid=$(pid_of "$1")
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

# write_config writes node n's server.properties for a cluster of count nodes.
write_config() {
	local n=$1 count=$2 voters=() i rf isr
	local ip listeners advertised protocols
	ip=$(node_ip)
	for i in $(seq 1 "$count"); do voters+=("$i@$ip:$(quorum_port "$i")"); done
	listeners="PLAINTEXT://$ip:$(client_port "$n"),CONTROLLER://$ip:$(quorum_port "$n")"
	advertised="PLAINTEXT://$ip:$(client_port "$n")"
	protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
	if netns; then
		# Clients of the relay get the relay's addresses in metadata.
		listeners+=",RELAY://$ip:$(relay_port "$n"),DELAYED://$ip:$(delayed_port "$n")"
		advertised+=",RELAY://$host_ip:$(relay_port "$n"),DELAYED://$host_ip:$(delayed_port "$n")"
		protocols+=",RELAY:PLAINTEXT,DELAYED:PLAINTEXT"
	fi
	rf=$count
	isr=$((count > 1 ? 2 : 1))
	cat >"$data/node-$n/server.properties" <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$(IFS=,; echo "${voters[*]}")
controller.listener.names=CONTROLLER
listeners=$listeners
advertised.listeners=$advertised
listener.security.protocol.map=$protocols
inter.broker.listener.name=PLAINTEXT
log.dirs=$data/node-$n/log
default.replication.factor=$rf
min.insync.replicas=$isr
unclean.leader.election.enable=false
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=10
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
# Tests write records with fixed timestamps years old: time-based retention
# would delete their segments under the test (seen: a committed transaction
# gone), and segments would roll on every batch. Size bounds the disk instead.
log.retention.ms=-1
log.retention.bytes=268435456
log.roll.ms=315360000000
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4
log.cleaner.threads=1
EOF
	# Later keys win in a properties file: KAFKA_PROPS overrides the above.
	local kv
	for kv in ${KAFKA_PROPS:-}; do
		[[ $kv == *=* ]] || die "KAFKA_PROPS: $kv is not key=value"
		echo "$kv" >>"$data/node-$n/server.properties"
	done
}

launch() {
	local n=$1 dir=$data/node-$1 wrap=()
	if netns; then
		wrap=(ip netns exec "$ns" taskset -c "$cpus")
	elif [[ -s $data/cpus ]]; then
		wrap=(taskset -c "$(cat "$data/cpus")")
	fi
	# A small heap and the serial collector: several JVMs share two cores.
	setsid "${wrap[@]}" java -Xms128m -Xmx"$heap" -XX:+UseSerialGC -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$repo/testenv/kafka/log4j2.properties" \
		-Dkafka.node.log="$dir/server.log" \
		-cp "$lib/*" kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 </dev/null &
	echo $! >"$dir/pid"
}

# metadata prints kcat's view of the cluster, empty when it cannot get one.
metadata() { timeout 10 kcat -L -b "$(brokers)" -m 5 2>/dev/null || true; }

# wait_until runs "$@" every second until it succeeds or secs pass.
wait_until() {
	local secs=$1 what=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@"; do
		((SECONDS < deadline)) || die "$what not reached within ${secs}s (logs: $data/node-*/server.log)"
		sleep 1
	done
}

all_registered() {
	local want=$1
	[[ $(metadata | grep -cE '^  broker [0-9]+ at') -eq $want ]]
}

# in_sync: every partition has as many in-sync replicas as replicas.
in_sync() {
	local md
	md=$(metadata)
	[[ -n $md ]] || return 1
	! awk '/partition [0-9]+, leader/ {
		r = $0; sub(/.*replicas: /, "", r); sub(/, isrs:.*/, "", r)
		i = $0; sub(/.*isrs: /, "", i); sub(/,? *$/, "", i)
		if (split(r, a, ",") != split(i, b, ",") || $0 ~ /leader -1/) bad = 1
	} END { exit !bad }' <<<"$md"
}

cmd_start() {
	local count=${1:-}
	[[ $count == 1 || $count == 3 ]] || die "usage: $0 start 1|3"
	command -v kcat >/dev/null || die "kcat is needed to check readiness (apt-get install -y kcat)"
	if [[ -f $data/nodes ]]; then
		for n in $(nodes); do running "$n" && die "node $n is running; '$0 stop' first"; done
	fi
	fetch_jars
	[[ ${KAFKA_NET:-} == "" || ${KAFKA_NET:-} == netns ]] || die "KAFKA_NET: want netns or nothing, got $KAFKA_NET"
	if [[ -f $data/net ]]; then net_down; fi
	rm -rf "$data"
	mkdir -p "$data"
	echo "$count" >"$data/nodes"
	if [[ -n ${KAFKA_CPUS:-} && ${KAFKA_NET:-} != netns ]]; then
		command -v taskset >/dev/null || die "KAFKA_CPUS needs taskset (util-linux)"
		taskset -c "$KAFKA_CPUS" true 2>/dev/null || die "KAFKA_CPUS: $KAFKA_CPUS is not a cpu list of this machine (0-$(($(nproc) - 1)))"
		echo "$KAFKA_CPUS" >"$data/cpus"
	fi
	if [[ ${KAFKA_NET:-} == netns ]]; then
		echo netns >"$data/net"
		# A start that fails half way leaves no namespace or node behind.
		trap 'start_failed' EXIT
		net_up
		relay_up "$count"
	fi
	local cluster_id
	cluster_id=$(java -cp "$lib/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
	for n in $(seq 1 "$count"); do
		mkdir -p "$data/node-$n"
		write_config "$n" "$count"
		java -Xmx256m -cp "$lib/*" -Dlog4j2.configurationFile="$repo/testenv/kafka/log4j2.properties" \
			-Dkafka.node.log="$data/node-$n/format.log" \
			kafka.tools.StorageTool format -t "$cluster_id" -c "$data/node-$n/server.properties" >"$data/node-$n/format.out" 2>&1 ||
			die "format node $n failed: $(cat "$data/node-$n/format.out")"
	done
	for n in $(seq 1 "$count"); do launch "$n"; done
	wait_until 180 "$count brokers registered" all_registered "$count"
	trap - EXIT
	log "ready: $(brokers)"
	if netns; then log "through the relay: $(brokers relay); with ${rtt_us}us round trips: $(brokers delayed)"; fi
}

start_failed() {
	local n
	log "start failed: stopping what was started"
	for n in $(nodes); do running "$n" && kill -KILL "$(pid_of "$n")" 2>/dev/null; done
	net_down
}

stop_node() {
	local n=$1 sig=$2 pid i
	pid=$(pid_of "$n")
	running "$n" || return 0
	kill "-$sig" "$pid"
	for i in $(seq 1 60); do
		kill -0 "$pid" 2>/dev/null || { rm -f "$data/node-$n/pid"; return 0; }
		sleep 1
	done
	log "node $n did not stop within 60s of SIG$sig; killing it"
	kill -KILL "$pid" 2>/dev/null || true
	rm -f "$data/node-$n/pid"
}

cmd_stop() {
	[[ -f $data/nodes ]] || return 0
	local n
	# Stop in parallel: a controlled shutdown waits for the others' leadership moves.
	for n in $(nodes); do stop_node "$n" TERM & done
	wait
	if netns; then net_down; fi
	log "stopped"
}

cmd_bounce() {
	local n=${1:-} sig=TERM
	[[ ${2:-} == --kill ]] && sig=KILL
	[[ -n $n && -d $data/node-$n ]] || die "usage: $0 bounce N [--kill]"
	running "$n" || die "node $n is not running"
	stop_node "$n" "$sig"
	launch "$n"
	wait_until 180 "node $n back in every ISR" in_sync
	log "node $n bounced (SIG$sig) and back in sync"
}

cmd_status() {
	local n state
	for n in $(nodes); do
		state=stopped
		running "$n" && state="running pid $(pid_of "$n") cpus $(taskset -cp "$(pid_of "$n")" 2>/dev/null | sed 's/.*: //')"
		echo "node $n $(node_ip):$(client_port "$n") $state"
	done
}

cmd_ready() {
	local count n
	count=$(cat "$data/nodes" 2>/dev/null) || die "no cluster: run 'make kafka-up' (or '$0 start 3') first"
	for n in $(nodes); do running "$n" || die "node $n is not running (see '$0 status'; 'make kafka-up' restarts the cluster)"; done
	all_registered "$count" || die "the cluster does not list its $count brokers yet (logs: $data/node-*/server.log)"
}

case ${1:-} in
start) cmd_start "${2:-}" ;;
stop) cmd_stop ;;
bounce) cmd_bounce "${2:-}" "${3:-}" ;;
status) cmd_status ;;
brokers) brokers "${2:-direct}" ;;
ready) cmd_ready ;;
fetch) fetch_jars ;;
net-down) net_down ;;
pids) for n in $(nodes); do running "$n" && pid_of "$n"; done | paste -sd, ;;
*) die "usage: $0 start 1|3 | stop | bounce N [--kill] | status | brokers [direct|relay|delayed] | ready | fetch | pids | net-down" ;;
esac
