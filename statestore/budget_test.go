package statestore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

func TestPlanMemTable(t *testing.T) {
	const MiB = 1 << 20
	for _, c := range []struct {
		size     int64
		override uint64
		stores   int
		want     uint64
		fits     bool
	}{
		// Half of the budget over 3 memtables per store, in 64 KiB steps.
		{512 * MiB, 0, 16, (256 * MiB / 48) &^ (64<<10 - 1), true},
		{512 * MiB, 0, 4, (256 * MiB / 12) &^ (64<<10 - 1), true},
		// Capped at 32 MiB (DefaultMemTableSize): one store keeps the
		// default index.
		{512 * MiB, 0, 1, 32 * MiB, true},
		{512 * MiB, 0, 2, 32 * MiB, true},
		{1 << 30, 0, 8, (512 * MiB / 24) &^ (64<<10 - 1), true},
		// Never below 4 MiB: a budget too small for its stores does not fit.
		{64 * MiB, 0, 16, 4 * MiB, false},
		{24 * MiB, 0, 1, 4 * MiB, true},
		{23 * MiB, 0, 1, 4 * MiB, false},
		// No stores counts as one (a group generation owning nothing).
		{512 * MiB, 0, 0, 32 * MiB, true},
		// An override is taken as it is; fits says whether half the
		// budget holds it.
		{64 * MiB, 1 * MiB, 3, 1 * MiB, true},
		{64 * MiB, 4 * MiB, 3, 4 * MiB, false},
		{64 * MiB, 128 << 10, 16, 128 << 10, true},
	} {
		t.Run(fmt.Sprintf("%dMiB/override=%d/stores=%d", c.size/MiB, c.override, c.stores), func(t *testing.T) {
			got, fits := PlanMemTable(c.size, c.override, c.stores)
			if got != c.want || fits != c.fits {
				t.Fatalf("PlanMemTable = %d, %t; want %d, %t", got, fits, c.want, c.fits)
			}
			if fits && uint64(memTablesPerStore*max(c.stores, 1))*got > uint64(c.size)/2 {
				t.Fatalf("fits, but %d stores' memtables take more than half of %d", c.stores, c.size)
			}
			if min := MinMemoryFor(c.override, c.stores); fits != (c.size >= min) && c.override == 0 && got == MinPlannedMemTableSize {
				t.Fatalf("MinMemoryFor = %d disagrees with fits %t at %d", min, fits, c.size)
			}
		})
	}
}

func TestNewBudgetRefusesBadSizes(t *testing.T) {
	_, err := NewBudget(1<<20, 1024)
	if err == nil {
		t.Fatal("NewBudget accepted a 1 MiB budget and a 1 KiB memtable")
	}
	for _, field := range []string{"memory: must be >=", "memtable_size: must be between"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %q", err, field)
		}
	}
}

// TestBudgetSharedByStores opens several stores under one budget, fills
// their memtables and reads from every one of them: each store must use the
// one shared cache (its blocks land there, its memtables are charged to it)
// and the memtable size the budget planned for that many stores.
func TestBudgetSharedByStores(t *testing.T) {
	const stores = 4
	const budgetSize = 256 << 20 // 4 stores: 256/2/12 = 10.6 MiB memtables
	b, err := NewBudget(budgetSize, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	wantMT, fits := b.MemTableSize(stores)
	if !fits || wantMT != 10<<20+10*64<<10 {
		t.Fatalf("plan: %d, fits %t", wantMT, fits)
	}

	fs := vfs.NewMem()
	var open []*Store
	for i := range stores {
		s := mustOpen(t, fmt.Sprintf("s%d", i), b.Options(Options{FS: fs}, stores))
		open = append(open, s)
	}
	// Every store: ~3 memtables of keys, flushed, then read back.
	for i, s := range open {
		if s.opts.MemTableSize != wantMT {
			t.Fatalf("store %d: memtable %d, want %d", i, s.opts.MemTableSize, wantMT)
		}
		batch := s.NewBatch()
		for c := range uint64(30) {
			for j := range uint64(5000) {
				batch.Put(1, keyOf(uint64(i)<<32|c, j), 0)
			}
			if _, err := s.Commit(batch, State{Generation: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
		for j := range uint64(5000) {
			if _, ok, err := s.Get(1, keyOf(uint64(i)<<32, j)); err != nil || !ok {
				t.Fatalf("store %d: key %d: %v, found %t", i, j, err, ok)
			}
		}
	}
	used := b.CacheUsed()
	if used == 0 {
		t.Fatal("no block in the shared cache after reads from every store")
	}
	var memtables uint64
	for i, s := range open {
		m := s.db.Metrics()
		// A store with a cache of its own reports that cache here.
		if m.BlockCache.Size != used {
			t.Fatalf("store %d: its block cache holds %d bytes, the shared one %d: not shared", i, m.BlockCache.Size, used)
		}
		if m.MemTable.Size > uint64(memTablesPerStore)*wantMT {
			t.Fatalf("store %d: memtables %d > %d x %d", i, m.MemTable.Size, memTablesPerStore, wantMT)
		}
		memtables += m.MemTable.Size
	}
	if memtables > budgetSize/2 {
		t.Fatalf("memtables %d exceed half the budget %d", memtables, budgetSize)
	}
	// The memtables are charged to the shared cache: blocks and memtables
	// together stay within the budget.
	if used+int64(memtables) > budgetSize {
		t.Fatalf("blocks %d + memtables %d exceed the budget %d", used, memtables, budgetSize)
	}
	if b.CacheCapacity() != budgetSize {
		t.Fatalf("cache capacity %d, want the budget %d", b.CacheCapacity(), budgetSize)
	}
	for _, s := range open {
		mustClose(t, s)
	}
	// Stores hold their own references: the budget's cache outlives them
	// and a store opened after others closed still uses it.
	s := mustOpen(t, "s0", b.Options(Options{FS: fs}, 1))
	if _, ok, err := s.Get(1, keyOf(0, 1)); err != nil || !ok {
		t.Fatalf("reopened store: %v, found %t", err, ok)
	}
	if got := s.db.Metrics().BlockCache.Size; got != b.CacheUsed() {
		t.Fatalf("reopened store's cache %d, shared %d", got, b.CacheUsed())
	}
	mustClose(t, s)
}

// BenchmarkCommitMemTable measures ingest against the memtable size, for the
// floor a Budget derives (MinPlannedMemTableSize). Use -benchtime=300x (3M
// keys); cpu-us/key includes flushes and compactions.
func BenchmarkCommitMemTable(b *testing.B) {
	for _, mt := range []uint64{2 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("memtable=%dMiB", mt>>20), func(b *testing.B) {
			s := benchOpen(b, Options{MemTableSize: mt})
			benchCommit(b, s, 10000)
		})
	}
}

// TestBudgetBoundsIndexes: a store's indexes of recent keys are charged to
// the shared cache while it is open (two indexes and the flusher's sort
// buffers), so blocks, memtables and indexes together stay within the
// budget: a store whose runs outgrow the cache, read back in full, leaves
// the blocks at most the budget minus its reservation. Close returns the
// reservation. The keys are read back by lookups (which read blocks
// themselves) and by scans of the generation, which read through Pebble and
// fill its cache (merges read their inputs themselves too: blockscan.go).
func TestBudgetBoundsIndexes(t *testing.T) {
	const budgetSize = 16 << 20
	b, err := NewBudget(budgetSize, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := mustOpen(t, "s", b.Options(Options{FS: vfs.NewMem()}, 1))
	reserved := int64(s.opts.indexReservation())
	if want := int64(2*memIndexBytes(s.memKeys, false) + 8*uint64(memSortKeys(s.memKeys))); reserved != want || reserved < 2<<20 {
		t.Fatalf("reservation %d, want %d (two indexes of %d keys and a sort buffer)", reserved, want, s.memKeys)
	}
	const keys = 600_000 // ~20 MiB of runs: more than the cache holds
	batch := s.NewBatch()
	for c := range uint64(keys / 10_000) {
		for j := range uint64(10_000) {
			batch.Put(1, keyOf(c, j), 0)
		}
		if _, err := s.Commit(batch, State{Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	peak := int64(0)
	for round := range 2 {
		for c := range uint64(keys / 10_000) {
			for j := uint64(round); j < 10_000; j += 7 {
				if _, ok, err := s.Get(1, keyOf(c, j)); err != nil || !ok {
					t.Fatalf("key %d/%d: %v, found %t", c, j, err, ok)
				}
			}
			peak = max(peak, b.CacheUsed())
		}
		n := 0
		if err := s.ScanGeneration(1, func(partition.Hash, uint64) error {
			if n++; n%10_000 == 0 {
				peak = max(peak, b.CacheUsed())
			}
			return nil
		}); err != nil || n != keys {
			t.Fatalf("scan: %d keys, %v", n, err)
		}
	}
	if peak+reserved > budgetSize {
		t.Fatalf("blocks peaked at %d with %d reserved for indexes: over the budget %d", peak, reserved, budgetSize)
	}
	if peak < budgetSize/4 {
		t.Fatalf("blocks peaked at %d: the reads did not fill the cache, nothing was checked", peak)
	}
	mustClose(t, s)
}

// TestBudgetBlocksFollowRuns: a budget's cache holds the blocks its stores'
// runs need (blockTarget: their filter and index blocks x1.5 and
// BlockDataRoom), not the whole budget: reads of more data than that leave
// the blocks within the room, the room follows the runs, and closing the
// last store gives the whole cache back. The run filters the store keeps in
// memory are reserved once, not needed as blocks too, and the room is real:
// the reads fill it (with the filters counted twice the cache had room for
// them again as blocks; with them left out of the reservations the cache
// had less room than BlockRoom said, here less than half).
func TestBudgetBlocksFollowRuns(t *testing.T) {
	const budgetSize = 256 << 20
	defer func(r int64) { blockDataRoom = r }(blockDataRoom)
	// So that a few MB of runs outgrow the room, and the kept filters
	// (1.25 MB) are most of it.
	blockDataRoom = 1 << 20
	b, err := NewBudget(budgetSize, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := mustOpen(t, "s", b.Options(Options{FS: vfs.NewMem()}, 1))
	if got := b.BlockRoom(); got != blockDataRoom {
		t.Fatalf("empty store: room %d, want the data room %d", got, blockDataRoom)
	}
	const keys = 1_000_000 // ~19 MB of runs: more than the room
	batch := s.NewBatch()
	for c := range uint64(keys / 10_000) {
		for j := range uint64(10_000) {
			batch.Put(1, keyOf(c, j), 0)
		}
		if _, err := s.Commit(batch, State{Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFlushed(t, s)
	need, data, kept := s.runs.Load().blockNeed()
	// Every run's filter, of its size's bits per key (a leaf's 8, a
	// merge's 4: runFilterBits).
	var filters int64
	for _, runs := range s.runs.Load().gens {
		for _, r := range runs {
			filters += int64(runFilterBlocks(r.keys, runFilterBits(r.keys, s.memKeys)))*runFilterBlockBytes + runFilterTrailer
		}
	}
	if kept < filters || kept < keys*int64(runFilterBitsLarge)/8 {
		t.Fatalf("runs keep %d bytes of filters in memory, less than their filters' %d bytes (%d keys)", kept, filters, keys)
	}
	if need >= kept/2 {
		t.Fatalf("runs need %d bytes of blocks beside the %d bytes of filters kept in memory: the filters are counted twice", need, kept)
	}
	room := b.BlockRoom()
	if want := blockTarget(need, data); room != want {
		t.Fatalf("room %d, want %d for %d bytes of index blocks", room, want, need)
	}
	if data < room {
		t.Fatalf("runs of %d bytes fit the room %d: the reads below check nothing", data, room)
	}
	peak := int64(0)
	for c := range uint64(keys / 10_000) {
		for j := uint64(0); j < 10_000; j += 50 {
			if _, ok, err := s.Get(1, keyOf(c, j)); err != nil || !ok {
				t.Fatalf("key %d/%d: %v, found %t", c, j, err, ok)
			}
		}
		peak = max(peak, b.CacheUsed())
	}
	// Pebble reserves the memtables it allocated, not the three the room
	// allows for.
	if slack := int64(memTableStopWrites+1) * maxPebbleMemTableSize; peak > room+slack {
		t.Fatalf("blocks peaked at %d: over the room %d the runs need", peak, room)
	}
	if peak < room*3/4 {
		t.Fatalf("blocks peaked at %d of a room of %d: the reads did not fill it (or the cache has less room than BlockRoom says)", peak, room)
	}
	mustClose(t, s)
	if got := b.BlockRoom(); got != budgetSize {
		t.Fatalf("no store open: room %d, want the whole budget %d", got, budgetSize)
	}
}

// TestRunIndexEstimate: the index blocks blockNeed counts for a run
// (bytes / runIndexRatio) are at least those Pebble wrote for it (table
// properties: every partition and the top-level index) and at most half
// as much again, so the cache's room for them is neither short nor
// padded (layout 2's 1/64 was 2.8 times the index blocks of packs).
func TestRunIndexEstimate(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{MemTableSize: 8 << 20})
	defer mustClose(t, s)
	b := s.NewBatch()
	for c := range uint64(60) {
		for j := range uint64(10_000) {
			b.Put(1+c/30, keyOf(c, j), 0)
		}
		if _, err := s.Commit(b, State{Generation: 1 + c/30}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFlushed(t, s)
	tables, err := s.db.SSTables(pebble.WithProperties())
	if err != nil {
		t.Fatal(err)
	}
	var index, data int64
	for _, level := range tables {
		for _, ti := range level {
			if ti.Properties.NumEntries < 1000 {
				continue // metadata, not a run
			}
			index += int64(ti.Properties.IndexSize)
			data += int64(ti.Size)
		}
	}
	// The runs as read through Pebble (without their blocks).
	rs := s.runs.Load()
	viaPebble := rs.clone()
	for _, runs := range viaPebble.gens {
		for i := range runs {
			runs[i].blocks = nil
		}
	}
	need, runBytes, filters := viaPebble.blockNeed()
	if runBytes != data || data < 8<<20 {
		t.Fatalf("runs of %d bytes, tables of %d: the test reads other tables (or too few)", runBytes, data)
	}
	if need < index || need > index*3/2 {
		t.Fatalf("blockNeed counts %d bytes of index blocks for runs whose tables hold %d", need, index)
	}
	// Read from their blocks, the runs need no index block from the
	// cache, and their fences are kept: a fraction of the index blocks.
	need, _, kept := rs.blockNeed()
	if fences := kept - filters; need != 0 || fences <= 0 || fences > index/2 {
		t.Fatalf("runs read from their blocks: blockNeed counts %d bytes of index blocks and %d of fences, index blocks %d", need, fences, index)
	}
	t.Logf("index blocks %d bytes, fences %d bytes, %d bytes of runs", index, kept-filters, data)
}

// TestBlockNeedWithoutFilter: a run whose filter is not in memory needs its
// index blocks only (runs carry no Pebble filter block), and its filter
// counts nowhere; one whose filter is kept counts it as kept.
func TestBlockNeedWithoutFilter(t *testing.T) {
	const bytes = 160 << 20
	rs := &runSet{gens: map[uint64][]run{1: {{gen: 1, id: 1, keys: 10_000_000, bytes: bytes}}}}
	need, data, kept := rs.blockNeed()
	if need != bytes/runIndexRatio || data != bytes || kept != 0 {
		t.Fatalf("need %d, data %d, kept %d; want %d, %d, 0", need, data, kept, bytes/runIndexRatio, bytes)
	}
	mf := newMemFilter(1 << 20)
	defer mf.drop()
	rs.gens[1] = append(rs.gens[1], run{gen: 1, id: 2, keys: 1_000_000, bytes: bytes, filter: mf})
	need, data, kept = rs.blockNeed()
	if need != 2*(bytes/runIndexRatio) || data != 2*bytes || kept != 1<<20 {
		t.Fatalf("need %d, data %d, kept %d; want %d, %d, %d", need, data, kept, 2*(bytes/runIndexRatio), 2*bytes, 1<<20)
	}
}

// TestDataRoom: the room for data blocks is BlockDataRoom while the runs
// are at most four times it, then shrinks with the share of reads it can
// serve, never below minBlockDataRoom; blockTarget adds the index blocks
// half again.
func TestDataRoom(t *testing.T) {
	const room = BlockDataRoom
	for _, c := range []struct{ data, want int64 }{
		{0, room},
		{4 * room, room},
		{8 * room, room / 2},
		{16 * room, room / 4},
		{1 << 40, minBlockDataRoom},
	} {
		if got := dataRoom(c.data); got != c.want {
			t.Errorf("dataRoom(%d) = %d, want %d", c.data, got, c.want)
		}
	}
	if got, want := blockTarget(10<<20, 1<<40), int64(15<<20)+minBlockDataRoom; got != want {
		t.Errorf("blockTarget = %d, want %d", got, want)
	}
}
