package statestore

import (
	"errors"
	"fmt"
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
// and the flusher's sort buffer (8 bytes per key of an index's 28, about
// 0.3 of one), Pebble at most
// three memtables of 512 KiB (they hold only metadata), so
//
//	MemTableSize = budget / 2 / (memTablesPerStore * stores)
//
// rounded down to 64 KiB and capped at MaxPlannedMemTableSize keeps the
// reservations to at most half of the budget. The other half (at least)
// holds the run filters the stores keep in memory (at most 1 byte per key,
// reserved by each store as its runs are recorded, filter.go) and sstable
// index blocks, which every Get needs: ~0.6 % of the data.
//
// The budget is a bound, not a target: blocks are held only as far as reads
// need them. The stores tell the budget the index blocks of their live runs
// (what every probe of a run reads from the cache; runs carry no Pebble
// filter blocks in layout 3, their filters are the store's own, in
// memory), the bytes of their runs, and the bytes of the filters kept in
// memory, counted with the reservations; the budget reserves whatever
// room for blocks is beyond
//
//	blocks = need * 3/2 + dataRoom(run bytes)
//
// (blockTarget), so data blocks, which a confirming read needs once, come
// from the operating system's page cache instead of filling the process:
// at 100M keys in one stage the cache otherwise held ~4 bytes per key of
// data blocks (docs/benchmarks.md, "Memory: blocks as reads need them").
// The data room is BlockDataRoom while the runs are at most four times
// that, and shrinks as they grow past it (dataRoom): confirming reads
// land on uniformly random blocks, so a room of R bytes serves R/data of
// them, and 32 MiB served 2 % at 100M keys for 0.34 bytes per key.
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
	need     int64 // index blocks of its live runs
	data     int64 // bytes of its live runs
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
	// DefaultMemTableSize (32 MiB, 1.2M keys: as many as 64 MiB held
	// before session 8, and before budgets). Larger ones measured no
	// faster; the rest of the budget serves blocks.
	MaxPlannedMemTableSize = DefaultMemTableSize

	// MinMemory is the smallest budget accepted at all; whether it fits
	// the stores is PlanMemTable's question.
	MinMemory int64 = 4 << 20

	// memTablesPerStore is what one store reserves, in MemTableSize units:
	// two indexes of recent keys, their sort buffer (0.3 of one) and
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
		stores: map[*Store]blockNeed{}}, nil
}

// BlockDataRoom is the room for data blocks a budget keeps beyond the
// index blocks the stores need while their runs are small (dataRoom): the
// blocks of the newest reads. Data blocks beyond it come from the page
// cache (a confirming read of a key in a run reads one; BenchmarkLayout
// measures the cost).
const BlockDataRoom int64 = 32 << 20

// blockDataRoom is BlockDataRoom; tests shrink it.
var blockDataRoom = BlockDataRoom

// minBlockDataRoom is the least room for data blocks (dataRoom).
const minBlockDataRoom int64 = 4 << 20

// dataRoom is the room for data blocks beside runs of data bytes:
// blockDataRoom while they are at most four times that (a quarter or
// more of the reads then find their block there; at 1M keys all of them
// do), then blockDataRoom x (4 blockDataRoom / data), which keeps the
// room's bytes times its share of the reads constant, down to
// minBlockDataRoom: 8 MiB at 30M keys, 4 at 100M, where 32 MiB cost 0.34
// bytes per key for 2 % of the reads (docs/benchmarks.md, "Memory at
// 100M by owner").
func dataRoom(data int64) int64 {
	if data <= 4*blockDataRoom {
		return blockDataRoom
	}
	return max(min(blockDataRoom, minBlockDataRoom), int64(float64(blockDataRoom)*float64(4*blockDataRoom)/float64(data)))
}

// blockTarget is the room for blocks the stores' needs call for: their
// index blocks half again (the cache's eviction is not exact and its
// shards fill unevenly) and the room for data blocks beside data bytes of
// runs (dataRoom).
func blockTarget(need, data int64) int64 {
	return need + need/2 + dataRoom(data)
}

// attach registers s, opened on the budget's cache, reserving reserved
// bytes there (its indexes) and needing the blocks of rs.
func (b *Budget) attach(s *Store, reserved int64, rs *runSet) {
	b.mu.Lock()
	defer b.mu.Unlock()
	need, data, kept := rs.blockNeed()
	b.stores[s] = blockNeed{reserved: reserved, kept: kept, need: need, data: data}
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
	need, data, kept := rs.blockNeed()
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.stores[s]
	if !ok || n.need == need && n.data == data && n.kept == kept {
		return
	}
	n.need, n.data, n.kept = need, data, kept
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
	var need, data int64
	for _, n := range b.stores {
		need += n.need
		data += n.data
	}
	reserved := b.reservedLocked()
	spare := max(0, b.size-reserved-blockTarget(need, data))
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

// runIndexRatio is a run's bytes per byte of its index blocks, rounded
// down from the measured 178 (packs of 64 hashes in 4 KiB blocks: a block
// of ~230 keys has one index entry of a shortened separator and a handle,
// ~26 bytes, in partitions of 4 KiB under a top-level index;
// TestRunIndexEstimate checks it against Pebble's table properties). It
// was 64 until session 8, from layout 2 (a key per hash): the cache was
// given room for three times the index blocks the runs had.
const runIndexRatio = 160

// blockNeed returns the index blocks of rs's runs, which every probe of a
// run reads from the cache, their bytes (data), and the bytes of the
// filters kept in memory (kept; 5-8 bits per key, filter.go). Runs carry no
// Pebble filter block (layout 3): a run whose filter is in memory needs
// only its index blocks from the cache (the kept filter is reserved on its
// own, keepFilters), and so does one whose filter could not be read at
// Open (it is probed by seeking it). A run read from its own blocks
// (blocks.go) needs no index block from the cache: its fences (about 0.03
// bytes per key) are kept and reserved like its filter. Until session 8 such a run was
// counted with the filter block layout 2 had, and the kept filters were
// counted in need as well until session 7 (room for them twice: 1.9 bytes
// per key of room for blocks at 100M keys where 0.6 were needed).
func (rs *runSet) blockNeed() (need, data, kept int64) {
	if rs == nil {
		return 0, 0, 0
	}
	for _, runs := range rs.gens {
		for _, r := range runs {
			if r.blocks == nil {
				need += int64(r.bytes / runIndexRatio)
			} else {
				// Read from its blocks (blocks.go), which holds its
				// fences itself: its index blocks are not read.
				kept += int64(r.blocks.mem)
			}
			data += int64(r.bytes)
			if r.filter != nil {
				kept += int64(len(r.filter.f))
			}
		}
	}
	return need, data, kept
}
