// Package machine holds benchmarks of the machine itself, not of
// dedupstream: figures that bound what the engine can reach there and that
// change from one machine to the next.
//
// BenchmarkRandomLoad is the latency of one dependent load at a random
// cache line of a working set, with the set on transparent huge pages and
// on 4 KiB pages:
//
//	go test -run '^$' -bench RandomLoad ./bench/machine/
//
// On the AMD EPYC Firecracker VM of sessions 12-17 (2 vCPUs, no PMU in the
// guest), session 17, ns per load, two runs with a sweep beside them (load
// 3-5), huge pages / 4 KiB pages: 4 MiB 60-210 / 16-260; 32 MiB 200-300 /
// 234-503; 256 MiB 232-460 / 413-684; 2 GiB 450-718 / 714-955. A load
// beyond the caches costs two to nine times a DRAM access, more the larger
// the set, and the guest's huge pages shorten it by less than they would
// on bare metal: each miss also walks the host's page tables, whose
// entries for a large set do not stay in the caches. This is what the
// sweep's 100M point pays against its 1M point (docs/benchmarks.md,
// "Session 17"): about the same accesses per record, into sets eight to
// twenty times larger.
package machine
