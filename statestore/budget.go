package statestore

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Budget bounds the state memory of every store of one process together:
// one block cache shared by all of them, to which each store charges its
// indexes of recent keys and Pebble its memtables, with the index size
// (Options.MemTableSize) planned from the budget and the number of stores
// open at a time.
//
// A charge is a reservation in the cache (pebble's Cache.Reserve): it
// shrinks the room left for blocks without using memory of its own, so a
// cache whose capacity is the whole budget bounds blocks, indexes and
// memtables together, as long as the reservations stay below it. A store
// reserves two indexes (the active one and the one being written as runs)
// and the flusher's sort buffers (a third of an index), Pebble at most
// three memtables of 512 KiB (they hold only metadata), so
//
//	MemTableSize = budget / 2 / (memTablesPerStore * stores)
//
// rounded down to 64 KiB and capped at MaxPlannedMemTableSize keeps the
// reservations to at most half of the budget. The other half (at least)
// holds sstable index and filter blocks, which every Get needs: about 1.3
// bytes per key for 10 bits/key filters, plus ~1 % of the data for indexes.
//
// The indexes are Go memory, the blocks C memory; the Bloom fronts and the
// Go runtime's headroom are outside the budget (SetGCPercent).
//
// A Budget must be closed after the last store using its cache closed.
type Budget struct {
	size     int64
	memTable uint64 // explicit override; 0 derives it from size
	cache    *pebble.Cache
}

// Defaults and bounds of a Budget.
const (
	// DefaultMemory is the budget of a process whose configuration sets
	// none. Measured: 16 stores of 1M keys each with their Bloom fronts
	// peaked at 399 MiB of RSS under it, 686 MiB with a cache per store
	// (docs/scaling.md, "Memory").
	DefaultMemory int64 = 512 << 20

	// MinPlannedMemTableSize is the smallest memtable a budget derives.
	// Smaller memtables flush so often that ingest costs more CPU per key
	// (BenchmarkCommitMemTable, one run on a loaded machine: 4.7 us at
	// 2 MiB, 3.9 at 4 MiB, 2.1 at 8 MiB, 2.3 at 64 MiB), so a budget too
	// small for its stores is refused where the store count is known (a
	// static assignment) and exceeded, with a warning, where it is not (see
	// PlanMemTable).
	MinPlannedMemTableSize uint64 = 4 << 20

	// MaxPlannedMemTableSize is the largest memtable a budget derives:
	// DefaultMemTableSize, what a store had before budgets. Larger ones
	// measured no faster; the rest of the budget serves blocks.
	MaxPlannedMemTableSize = DefaultMemTableSize

	// MinMemory is the smallest budget accepted at all; whether it fits
	// the stores is PlanMemTable's question.
	MinMemory int64 = 4 << 20

	// memTablesPerStore is what one store reserves, in MemTableSize units:
	// two indexes of recent keys, their sort buffers (a third of one) and
	// Pebble's memtables (at most 3 x 512 KiB, a third of the smallest
	// planned size); memReservedBytes is the exact figure.
	memTablesPerStore = 3
)

// MinMemTableSize and MaxMemTableSize bound Options.MemTableSize: below the
// minimum Pebble flushes after every few commits, at the maximum Pebble
// refuses to open.
const (
	MinMemTableSize uint64 = minMemTableSize
	MaxMemTableSize uint64 = 4<<30 - 1
)

// NewBudget returns a budget of size bytes. memTable, when not 0, fixes the
// memtable size of every store instead of deriving it from the budget; it
// must be within [MinMemTableSize, MaxMemTableSize].
func NewBudget(size int64, memTable uint64) (*Budget, error) {
	var errs []error
	if size < MinMemory {
		errs = append(errs, fmt.Errorf("statestore: memory: must be >= %d, got %d", MinMemory, size))
	}
	if memTable != 0 && (memTable < MinMemTableSize || memTable > MaxMemTableSize) {
		errs = append(errs, fmt.Errorf("statestore: memtable_size: must be between %d and %d, got %d", MinMemTableSize, MaxMemTableSize, memTable))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Budget{size: size, memTable: memTable, cache: pebble.NewCache(size)}, nil
}

// PlanMemTable returns the memtable size of each of stores stores under a
// budget of size bytes, with memTable as an explicit override (0: derive
// it). fits is false when the memtables of that many stores need more than
// half of the budget: the derived size would fall below
// MinPlannedMemTableSize (it is then MinPlannedMemTableSize), or the
// override is too large for the budget. Memory then exceeds the budget by up
// to memTablesPerStore*stores*size - size/2, and blocks are evicted first.
func PlanMemTable(size int64, memTable uint64, stores int) (mt uint64, fits bool) {
	stores = max(stores, 1)
	half := uint64(max(size, 0)) / 2
	limit := half / uint64(memTablesPerStore*stores)
	if memTable != 0 {
		return memTable, memTable <= limit
	}
	mt = min(limit&^(64<<10-1), MaxPlannedMemTableSize)
	if mt < MinPlannedMemTableSize {
		return MinPlannedMemTableSize, false
	}
	return mt, true
}

// MinMemoryFor returns the smallest budget under which stores stores fit
// (PlanMemTable's fits), with memTable as in PlanMemTable.
func MinMemoryFor(memTable uint64, stores int) int64 {
	if memTable == 0 {
		memTable = MinPlannedMemTableSize
	}
	return 2 * int64(memTablesPerStore*max(stores, 1)) * int64(memTable)
}

// IndexBytes returns what stores stores reserve in the budget for their
// indexes of recent keys (two each, and sort buffers), at the planned
// MemTableSize: Go heap memory, which the Go runtime's GC target
// multiplies.
func (b *Budget) IndexBytes(stores int) int64 {
	mt, _ := b.MemTableSize(stores)
	o := Options{MemTableSize: mt}
	return int64(stores) * int64(o.indexReservation())
}

// Size returns the budget in bytes.
func (b *Budget) Size() int64 { return b.size }

// MemTableSize returns the memtable size of each store while stores stores
// are open; fits as in PlanMemTable.
func (b *Budget) MemTableSize(stores int) (mt uint64, fits bool) {
	return PlanMemTable(b.size, b.memTable, stores)
}

// Options returns o with the shared cache and the memtable size of one of
// stores stores set.
func (b *Budget) Options(o Options, stores int) Options {
	o.Cache = b.cache
	o.MemTableSize, _ = b.MemTableSize(stores)
	return o
}

// CacheCapacity is the shared cache's capacity: the budget.
func (b *Budget) CacheCapacity() int64 { return b.cache.MaxSize() }

// CacheUsed is the bytes of blocks held in the shared cache now; the
// reservations of indexes and memtables are not counted.
func (b *Budget) CacheUsed() int64 { return b.cache.Size() }

// Close drops the budget's reference to the shared cache; the cache's
// memory is freed once the last store using it closed too.
func (b *Budget) Close() { b.cache.Unref() }
