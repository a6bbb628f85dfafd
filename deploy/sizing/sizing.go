// Package sizing is the sizing rule of docs/deploy.md as code: memory, CPU
// and disk of one dedupstream instance from its job config, the output
// topic's partition count, the instance count and the input rate. The
// manifests in deploy/kubernetes carry its inputs as annotations on the
// StatefulSet, and their test checks the resources against Plan.
//
// Every figure is a named constant with the measurement it comes from, so
// that a new measurement (or the shared state.memory budget replacing the
// per-store cache and memtables) changes one line here and the test then
// names every manifest that no longer agrees.
package sizing

import (
	"fmt"
	"math"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/dedupstream/dedupstream/statestore"
)

// The figures the rule uses.
const (
	// IndexMemTables is how many memtable-sized in-memory indexes of
	// recent keys a store of layout 2 holds while one is written as a run
	// (the filling one and the flushing one, off the Go heap; one between
	// flushes, statestore/doc.go). They are reserved in state.memory too;
	// counting them apart keeps room for the flusher's sort buffers and
	// the cache's overshoot.
	IndexMemTables = 2
	// WALMemTables is how many memtables' worth of commit log a store
	// keeps on disk (the filling index, the flushing one, one spare).
	WALMemTables = 3
	// MemoryPerKeyBytes is the RSS per key in the window outside
	// state.memory and the two indexes, Bloom front included: the front
	// (2.15 B/key measured at 1 %), the Go heap and Pebble's C memory
	// outside the block cache, with what glibc keeps free. Measured at
	// 100M keys in one stage (docs/benchmarks.md, "Memory at 100M by
	// owner", session 7): RSS peak 571 MiB less the process at start
	// (27 MiB), the block cache (67 MiB) and the run filters (103 MiB),
	// which are inside state.memory, and the indexes and sort buffers at
	// their peak (69 MiB), over 100M keys: 3.2 B/key, rounded up. The
	// run filters (1 B/key) and index blocks (x1.5, ~0.9 B/key) plus
	// 32 MiB are inside state.memory, which a 512 MiB budget holds up to
	// ~150M keys per instance. The whole RSS growth beyond the front was
	// 3.6 B/key at 100M (7.4 in session 6, when the run filters were in
	// the Go heap and counted twice in the cache's room; this figure was
	// 4.5 then, measured at 30M). It is measured at a 1 % false-positive
	// rate; BloomShareBytes of it is the Bloom front, which scales with
	// -ln(rate). Session 8 (indexes of 28 bytes per key, the cache sized
	// for packed runs' index blocks): RSS peak 476 MiB at 100M less the
	// start (~28 MiB), the block cache (16), the run filters (97) and the
	// indexes at their peak (58): 2.9 B/key, under this bound, which
	// stays (docs/benchmarks.md, "Memory at 100M by owner (issue 12,
	// session 8)"). Session 17's front (128-bit blocks in shared rows)
	// takes 15.2 bits per key where it took 13.2: 2.9 + 0.3 = 3.2 B/key,
	// still under this bound.
	MemoryPerKeyBytes = 3.5
	// BloomShareBytes is the Bloom front per key at 1 % false positives:
	// 2.02 B/key measured (docs/benchmarks.md) with 512-bit blocks, times
	// 15.24/13.17 bits per key for the 128-bit blocks of session 17.
	BloomShareBytes = 2.33
	// ProcessBaseBytes is the allowance for what is not per partition:
	// the Go runtime, the metrics registry, the consumer group, one fetch
	// and produce buffer set. It is an allowance, not a measurement.
	ProcessBaseBytes = 64 << 20
	// MemoryLimitFactor: limits.memory is requests.memory times this, for
	// a commit cycle's records (up to commit.max_records) and the Go
	// collector's headroom (GOMEMLIMIT is set to the request).
	MemoryLimitFactor = 1.25
	// DiskPerKeyBytes is the store on disk per key in the window
	// (docs/benchmarks.md: 22.6 B/key at 1M and 10M, 21.0 at 100M).
	DiskPerKeyBytes = 22.6
	// DiskCompactionFactor doubles the store for compactions, which write
	// the new files before deleting the old.
	DiskCompactionFactor = 2
	// MinDiskBytes is the smallest volume claimed.
	MinDiskBytes = 1 << 30
)

// CPUPerRecord is the CPU time per input record by keys in the window, from
// the window sweep of docs/benchmarks.md (5 % duplicates): one core divided
// by the records/s measured with the store's compactions on the second core,
// so it includes them. Rows are in ascending keys; a window beyond the last
// row uses the last row.
var CPUPerRecord = []struct {
	Keys    int64
	Seconds float64
}{
	{1_000_000, 1 / 193e3},    // 5.2 us
	{10_000_000, 1 / 113e3},   // 8.8 us
	{100_000_000, 1 / 34.2e3}, // 29 us
}

// Inputs are the facts the config does not hold.
type Inputs struct {
	// Partitions is the output topic's partition count N.
	Partitions int
	// Replicas is the instance count.
	Replicas int
	// RecordsPerSecond is the peak input rate per partition.
	RecordsPerSecond float64
	// StaticShares, in static mode, is each instance's partition count
	// (from its partitions file); nil in group mode.
	StaticShares []int
}

// Plan is one instance's resources.
type Plan struct {
	// MemoryStages is the partitions the memory is sized for; CPUStages
	// the partitions the CPU is sized for.
	MemoryStages, CPUStages int
	// MemoryRequest and MemoryLimit in bytes, rounded up to MiB.
	MemoryRequest, MemoryLimit int64
	// CPURequestMilli in millicores, rounded up to 100m.
	CPURequestMilli int64
	// DiskBytes is the state volume, rounded up to GiB.
	DiskBytes int64
}

// MemoryPerStage is one partition's memory outside the instance's shared
// budget: its in-memory index of recent keys (IndexMemTables memtables of
// the size the budget plans for stages stores) plus the per-key figure for
// the window's keys.
func MemoryPerStage(c *config.Config, stages int) float64 {
	d := dedupOf(c)
	perKey := MemoryPerKeyBytes - BloomShareBytes + BloomShareBytes*math.Log(d.FalsePositiveRate)/math.Log(0.01)
	mt, _ := statestore.PlanMemTable(int64(memoryOf(c)), uint64(c.State.MemTableSize), stages)
	return IndexMemTables*float64(mt) + perKey*float64(d.ExpectedKeys)
}

// memoryOf is state.memory with its default.
func memoryOf(c *config.Config) config.ByteSize {
	if c.State.Memory == 0 {
		return config.ByteSize(statestore.DefaultMemory)
	}
	return c.State.Memory
}

// DiskPerStage is one partition's store on disk: the keys of the live
// generations (window + window/generations) with room for compactions, the
// write-ahead log of the memtables, and the dead tables kept for reuse (at
// most statestore.RecycleBytes, and never more than the store itself).
func DiskPerStage(c *config.Config, stages int) float64 {
	d := dedupOf(c)
	live := float64(d.ExpectedKeys) * float64(d.Generations+1) / float64(d.Generations)
	mt, _ := statestore.PlanMemTable(int64(memoryOf(c)), uint64(c.State.MemTableSize), stages)
	keys := live * DiskPerKeyBytes
	return keys*DiskCompactionFactor + WALMemTables*float64(mt) + min(keys, statestore.RecycleBytes)
}

// dedupOf is the dedup figures the rule reads, with the stage's defaults
// for those the file leaves out.
func dedupOf(c *config.Config) pipeline.Config {
	d := pipeline.Config{
		Generations:       c.Dedup.Generations,
		ExpectedKeys:      c.Dedup.ExpectedKeys,
		FalsePositiveRate: c.Dedup.FalsePositiveRate,
	}
	d.ApplyDefaults()
	return d
}

// cpuPerRecord picks the row for the window's keys.
func cpuPerRecord(keys uint) float64 {
	for _, r := range CPUPerRecord {
		if int64(keys) <= r.Keys {
			return r.Seconds
		}
	}
	return CPUPerRecord[len(CPUPerRecord)-1].Seconds
}

// Stages returns the partitions an instance is sized for. Memory, which is
// not compressible, covers the worst case: in group mode the share after
// one instance is gone (ceil(N/(R-1)); a PodDisruptionBudget of one plus
// nothing else failing), in static mode the largest partitions file. CPU,
// which is, covers the fair share: ceil(N/R), or the largest file.
func Stages(in Inputs) (memory, cpu int, err error) {
	if in.Partitions < 1 || in.Replicas < 1 {
		return 0, 0, fmt.Errorf("sizing: partitions and replicas must be >= 1, got %d and %d", in.Partitions, in.Replicas)
	}
	if in.StaticShares != nil {
		m := 0
		for _, s := range in.StaticShares {
			m = max(m, s)
		}
		return m, m, nil
	}
	survivors := max(1, in.Replicas-1)
	return min(in.Partitions, ceilDiv(in.Partitions, survivors)), min(in.Partitions, ceilDiv(in.Partitions, in.Replicas)), nil
}

// Size applies the rule to a validated config.
func Size(c *config.Config, in Inputs) (Plan, error) {
	ms, cs, err := Stages(in)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{MemoryStages: ms, CPUStages: cs}
	// state.memory bounds the Pebble cache and memtables of every store
	// of the instance together; the rest grows with the stages.
	mem := ProcessBaseBytes + float64(memoryOf(c)) + float64(ms)*MemoryPerStage(c, ms)
	p.MemoryRequest = roundUp(int64(math.Ceil(mem)), 1<<20)
	p.MemoryLimit = roundUp(int64(math.Ceil(float64(p.MemoryRequest)*MemoryLimitFactor)), 1<<20)
	cores := float64(cs) * in.RecordsPerSecond * cpuPerRecord(dedupOf(c).ExpectedKeys)
	p.CPURequestMilli = max(100, roundUp(int64(math.Ceil(cores*1000)), 100))
	// Group mode keeps a partition's directory when it moves away, and
	// any partition may come by: the volume holds all N. Static mode
	// holds its own file's partitions.
	disk := float64(in.Partitions) * DiskPerStage(c, ms)
	if in.StaticShares != nil {
		disk = float64(ms) * DiskPerStage(c, ms)
	}
	p.DiskBytes = max(MinDiskBytes, roundUp(int64(math.Ceil(disk)), 1<<30))
	return p, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func roundUp(v, unit int64) int64 { return (v + unit - 1) / unit * unit }

// Bytes writes a size as a Kubernetes quantity in Gi or Mi (exact: Plan's
// sizes are whole MiB).
func Bytes(b int64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%dGi", b>>30)
	}
	return fmt.Sprintf("%dMi", (b+(1<<20)-1)>>20)
}

// Milli writes millicores as a Kubernetes quantity.
func Milli(m int64) string {
	if m%1000 == 0 {
		return fmt.Sprintf("%d", m/1000)
	}
	return fmt.Sprintf("%dm", m)
}
