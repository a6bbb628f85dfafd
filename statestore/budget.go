package statestore

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

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
// holds the run filters the stores keep in memory (1 byte per key,
// reserved by each store as its runs are recorded, filter.go) and sstable
// index blocks, which every Get needs: ~1 % of the data.
//
// The budget is a bound, not a target: blocks are held only as far as reads
// need them. The stores tell the budget the index blocks of their live runs
// and the filter blocks of runs whose filter is not in memory (what every
// probe of a run reads from the cache), and the bytes of the filters kept
// in memory, counted with the reservations; the budget reserves whatever
// room for blocks is beyond
//
//	blocks = max(need * 3/2 + BlockDataRoom, 2 * shards * largest filter)
//
// (blockTarget), so data blocks, which a confirming read needs once, come
// from the operating system's page cache instead of filling the process:
// at 100M keys in one stage the cache otherwise held ~4 bytes per key of
// data blocks (docs/benchmarks.md, "Memory: blocks as reads need them").
//
// The indexes and the kept run filters are off the Go heap where the
// platform allows (memalloc.go), the blocks C memory; the Bloom fronts and
// the Go runtime's headroom are outside the budget (SetGCPercent).
//
// A Budget must be closed after the last store using its cache closed.
type Budget struct {
	size     int64
	memTable uint64 // explicit override; 0 derives it from size
	cache    *pebble.Cache
	shards   int // the cache's shard count (cacheShards)

	mu     sync.Mutex
	stores map[*Store]blockNeed // the stores open on the cache
	// unspare releases the reservation of the room no store needs (nil:
	// none); spare is its size.
	unspare func()
	spare   int64
}

// blockNeed is what one store asks of the shared cache.
type blockNeed struct {
	reserved int64 // its indexes and Pebble's memtables (reservations)
	kept     int64 // the run filters it keeps in memory (reservations)
	need     int64 // filter and index blocks of its live runs
	largest  int64 // its largest filter block
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
	return &Budget{size: size, memTable: memTable, cache: pebble.NewCache(size),
		shards: cacheShards(size), stores: map[*Store]blockNeed{}}, nil
}

// BlockDataRoom is the room for data blocks a budget keeps beyond the
// filter and index blocks the stores need: the blocks of the newest
// reads. Data blocks beyond it come from the page cache (a confirming
// read of a key in a run reads one; BenchmarkLayout measures the cost).
const BlockDataRoom int64 = 32 << 20

// blockDataRoom is BlockDataRoom; tests shrink it.
var blockDataRoom = BlockDataRoom

// cacheShards is the shard count pebble.NewCache gives a cache of size
// bytes (4 per GOMAXPROCS, 4 when a shard would be below 4 MiB). A block
// larger than a shard's share is never cached, so the room for blocks
// keeps two of the largest filter per shard.
func cacheShards(size int64) int {
	m := 4 * runtime.GOMAXPROCS(0)
	if m > 4 && size/int64(m) < 4<<20 {
		m = 4
	}
	return m
}

// blockTarget is the room for blocks the stores' needs call for: their
// filter and index blocks half again (the cache's eviction is not exact
// and its shards fill unevenly), BlockDataRoom for data blocks, and at
// least two of the largest filter block per shard.
func blockTarget(need, largest int64, shards int) int64 {
	return max(need+need/2+blockDataRoom, 2*int64(shards)*largest)
}

// attach registers s, opened on the budget's cache, reserving reserved
// bytes there (its indexes) and needing the blocks of rs.
func (b *Budget) attach(s *Store, reserved int64, rs *runSet) {
	b.mu.Lock()
	defer b.mu.Unlock()
	need, largest, kept := rs.blockNeed()
	b.stores[s] = blockNeed{reserved: reserved, kept: kept, need: need, largest: largest}
	b.rebalanceLocked()
}

// detach forgets s (closed).
func (b *Budget) detach(s *Store) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.stores, s)
	b.rebalanceLocked()
}

// noteRuns records that s's live runs are now rs.
func (b *Budget) noteRuns(s *Store, rs *runSet) {
	need, largest, kept := rs.blockNeed()
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.stores[s]
	if !ok || n.need == need && n.largest == largest && n.kept == kept {
		return
	}
	n.need, n.largest, n.kept = need, largest, kept
	b.stores[s] = n
	b.rebalanceLocked()
}

// reservedLocked is what the stores reserve in the cache themselves:
// indexes, Pebble's memtables and the run filters they keep in memory.
// Under mu.
func (b *Budget) reservedLocked() int64 {
	var reserved int64
	for _, n := range b.stores {
		reserved += n.reserved + n.kept + int64(memTableStopWrites+1)*maxPebbleMemTableSize
	}
	return reserved
}

// rebalanceLocked sets the reservation of the room no store needs: the
// cache less the stores' reservations and the room blockTarget asks for.
// The old reservation is released before the new one is taken, so blocks
// are evicted only when the room shrinks. Under mu.
func (b *Budget) rebalanceLocked() {
	var need, largest int64
	for _, n := range b.stores {
		need += n.need
		largest = max(largest, n.largest)
	}
	reserved := b.reservedLocked()
	spare := max(0, b.size-reserved-blockTarget(need, largest, b.shards))
	if len(b.stores) == 0 {
		spare = 0
	}
	if spare == b.spare {
		return
	}
	if b.unspare != nil {
		b.unspare()
		b.unspare = nil
	}
	b.spare = spare
	if spare > 0 {
		b.unspare = b.cache.Reserve(int(spare))
	}
}

// BlockRoom is the room for blocks the budget's cache has now: its
// capacity less every reservation (indexes, memtables, run filters kept in
// memory, and the room the stores' runs do not need).
func (b *Budget) BlockRoom() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(0, b.size-b.reservedLocked()-b.spare)
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
// MemTableSize: memory outside the Go heap (memalloc.go).
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
	o.budget = b
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
func (b *Budget) Close() {
	b.mu.Lock()
	if b.unspare != nil {
		b.unspare()
		b.unspare = nil
		b.spare = 0
	}
	b.mu.Unlock()
	b.cache.Unref()
}

// blockNeed returns the filter and index blocks of rs's runs, which every
// probe of a run reads, the largest filter block, and the bytes of the
// filters kept in memory (kept): a run's filter is 8 bits per key
// (filter.go), its index about 1/64 of its bytes (a 4 KiB data block of
// ~190 keys has one entry of a separator and a handle). A run whose filter
// the store keeps in memory needs only its index blocks from the cache:
// its iterators skip Pebble's filter, and the kept filter is reserved in
// the cache on its own (keepFilters). Until session 7 it was counted in
// need as well, so the cache left room for the filters twice: 1.9 bytes
// per key of room for blocks at 100M keys where 0.6 were needed.
func (rs *runSet) blockNeed() (need, largest, kept int64) {
	if rs == nil {
		return 0, 0, 0
	}
	for _, runs := range rs.gens {
		for _, r := range runs {
			need += int64(r.bytes / 64)
			if r.filter != nil {
				kept += int64(len(r.filter.f))
				continue
			}
			f := int64(runFilterBlocks(r.keys)*runFilterBlockBytes + runFilterTrailer)
			need += f
			largest = max(largest, f)
		}
	}
	return need, largest, kept
}
