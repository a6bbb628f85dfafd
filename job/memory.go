package job

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/statestore"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultGCPercent is the Go garbage collector's target of a running job
// (GOGC) unless the environment sets GOGC: the heap may grow to 1.5x what
// is live after a collection instead of 2x. The large arrays (Bloom
// sub-filters of 2 MiB or more, the indexes of recent keys and their sort
// buffers, and since session 7 the run filters the stores keep in memory,
// 1.25 bytes per key) live in mappings outside the Go heap, which the
// collector neither scans nor counts toward GOGC: at 30M keys in one stage
// the live heap is ~11 MiB and its goal 15 MiB (it was 46 and 69 MiB with
// the run filters in it), so the target now matters little; the small
// fronts it still holds have no pointers, so collecting more often costs
// little CPU (measured when the heap still held the fronts and indexes, at
// 30M keys in one stage: RSS 831 MiB at GOGC=25 against 1140 MiB at 100,
// docs/benchmarks.md "Memory").
const DefaultGCPercent = 50

// TuneGC sets the process's GC target to DefaultGCPercent unless GOGC is
// set in the environment, and returns the previous target (to restore it
// with debug.SetGCPercent). "dedupstream run" calls it before the job
// starts; a program embedding the job decides for itself.
func TuneGC() (prev int) {
	if os.Getenv("GOGC") != "" {
		prev = debug.SetGCPercent(-1)
		debug.SetGCPercent(prev)
		return prev
	}
	return debug.SetGCPercent(DefaultGCPercent)
}

// memory is the instance's state memory: one statestore.Budget for every
// store the job opens (state.memory), and the plan of the current
// assignment. Static mode plans once; group mode plans per generation, from
// the partitions that generation owns, because stores are reopened per
// generation.
type memory struct {
	budget *statestore.Budget
	// Guarded by Job.mu.
	stores   int    // stores of the current assignment
	memTable uint64 // memtable size of each of them
	fits     bool   // their memtables fit in half of the budget
}

// openMemory creates the budget of a run; the caller closes it once every
// store is closed.
func (j *Job) openMemory() error {
	b, err := statestore.NewBudget(int64(j.cfg.State.Memory), uint64(j.cfg.State.MemTableSize))
	if err != nil {
		return fmt.Errorf("job: state memory: %w", err)
	}
	j.mu.Lock()
	j.mem = &memory{budget: b}
	j.mu.Unlock()
	return nil
}

func (j *Job) closeMemory() {
	j.mu.Lock()
	m := j.mem
	j.mem = nil
	j.mu.Unlock()
	if m != nil {
		m.budget.Close()
	}
}

// planMemory sizes the memtables of the n stores an assignment is about to
// open. A budget too small for them (group mode: more partitions than it was
// sized for) is exceeded rather than refused, with a warning: the group
// would only hand the partitions to another member.
func (j *Job) planMemory(n int) {
	j.mu.Lock()
	m := j.mem
	mt, fits := m.budget.MemTableSize(n)
	m.stores, m.memTable, m.fits = n, mt, fits
	j.mu.Unlock()
	mem, memTable := config.ByteSize(m.budget.Size()), config.ByteSize(mt)
	if !fits {
		j.log.Warn("state.memory is too small for the partitions owned: their memtables exceed half of it, blocks are evicted first and memory may exceed it",
			"memory", mem, "partitions", n, "memtable_size", memTable,
			"memory_needed", config.ByteSize(statestore.MinMemoryFor(uint64(j.cfg.State.MemTableSize), n)))
		return
	}
	j.log.Info("state memory planned", "memory", mem, "partitions", n, "memtable_size", memTable)
}

// storeOptions returns o with the shared cache and the planned memtable
// size set.
func (j *Job) storeOptions(o statestore.Options) statestore.Options {
	j.mu.Lock()
	m := j.mem
	n := m.stores
	j.mu.Unlock()
	return m.budget.Options(o, n)
}

var (
	descMemBudget   = prometheus.NewDesc("dedupstream_state_memory_budget_bytes", "state.memory: the bound on the Pebble block cache and memtables of every store of this instance together (the Bloom fronts are outside it).", nil, nil)
	descCacheUsed   = prometheus.NewDesc("dedupstream_state_block_cache_used_bytes", "Bytes of sstable blocks in the block cache the stores of this instance share; memtables are charged to the same budget on top.", nil, nil)
	descMemTable    = prometheus.NewDesc("dedupstream_state_memtable_size_bytes", "Size of the index of recent keys of each store of the current assignment (the layout's memtable; 2 per store plus sort buffers), derived from state.memory and the partitions owned.", nil, nil)
	descIndexMemory = prometheus.NewDesc("dedupstream_state_index_memory_bytes", "Bytes the stores of the current assignment reserve in state.memory for their indexes of recent keys (off the Go heap); blocks get what the reservations leave.", nil, nil)
	descBlockRoom   = prometheus.NewDesc("dedupstream_state_block_room_bytes", "Room the shared block cache gives sstable blocks now: state.memory less the stores' reservations (indexes, memtables, the run filters kept in memory) and the room their runs do not need (index blocks, and filter blocks of runs whose filter is not in memory, x1.5 plus 32 MiB for data blocks; data blocks beyond it are read from the OS page cache).", nil, nil)
	descOverBudget  = prometheus.NewDesc("dedupstream_state_memory_over_budget", "1 when the memtables of the partitions owned need more than half of state.memory (group mode, more partitions than the budget was sized for), else 0.", nil, nil)
	descBloomMemory = prometheus.NewDesc("dedupstream_bloom_memory_bytes", "Bytes the partition's Bloom front holds in memory (outside state.memory).", lp, nil)
)

var memoryDescs = []*prometheus.Desc{descMemBudget, descCacheUsed, descBlockRoom, descMemTable, descIndexMemory, descOverBudget, descBloomMemory}

// collectMemory sends the instance's memory metrics while a run is on.
func (j *Job) collectMemory(ch chan<- prometheus.Metric) {
	j.mu.Lock()
	defer j.mu.Unlock() // closeMemory releases the budget only after taking it
	m := j.mem
	if m == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(descMemBudget, float64(m.budget.Size()))
	gauge(descCacheUsed, float64(m.budget.CacheUsed()))
	gauge(descBlockRoom, float64(m.budget.BlockRoom()))
	gauge(descMemTable, float64(m.memTable))
	gauge(descIndexMemory, float64(m.budget.IndexBytes(m.stores)))
	over := 0.0
	if !m.fits && m.memTable != 0 {
		over = 1
	}
	gauge(descOverBudget, over)
}
