// Package chaos is the fault suite: bounded runs of the dedupstream job
// against a real 3-broker Apache Kafka cluster (testenv/kafka.sh) under the
// faults operators meet, each checked by an independent reader.
//
// The tests run only when CHAOS is "short" or "full" and KAFKA_BROKERS names
// the cluster (make chaos sets both); otherwise they skip, so make test
// stays fast. Each run draws its fault schedule from a seed (CHAOS_SEED, or
// the clock), prints it, writes the schedule to CHAOS_OUT (default
// .kafka/chaos) and on failure prints the command that replays it. A replay
// repeats the schedule (which kills, which brokers, which responses are
// lost, in which order); the timing of the job against it varies.
//
// Every run checks G1 (no business key twice in the committed output) and
// G2 (every first record in the output, every poison record in the DLQ,
// in = out + dropped + dlq) by reading read_committed with franz-go's kgo,
// and cross-checks the count of each output key with kcat.
//
// # Faults
//
//   - TestKillJob: "dedupstream run" as a subprocess, SIGKILLed at seeded
//     moments (>= 20 times in full mode, the first after 20% of the input
//     is committed) while input keeps arriving.
//   - TestBrokerBounce: the leader of a seeded partition is stopped and
//     restarted, alternately cleanly and with SIGKILL, while the job runs.
//   - TestLostResponses: the job reaches the brokers through a Proxy per
//     broker that loses Produce and EndTxn responses at a seeded rate, by
//     closing the connection or by swallowing everything after them.
//   - TestDiskFaults: the state store of a seeded partition gets ENOSPC on
//     writes or failing syncs through pebble's errorfs; the job must stop
//     with "statestore: fatal:" and a restart without the fault must lose
//     nothing.
//   - TestZombie: two instances in assignment mode group; one is frozen
//     with SIGSTOP at a seeded moment past its session timeout, the other
//     takes every partition over (fencing the frozen one's producers), then
//     SIGCONT: the zombie must be fenced and rejoin, and nothing it had in
//     flight may reach the output.
package chaos
