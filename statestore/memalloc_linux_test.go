//go:build linux

package statestore

import (
	"os"
	"runtime/debug"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// resident returns how many bytes of r are in memory (mincore).
func resident(t *testing.T, r []byte) int {
	t.Helper()
	if len(r) == 0 {
		return 0
	}
	page := os.Getpagesize()
	vec := make([]byte, (len(r)+page-1)/page)
	_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(r))), uintptr(len(r)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n * page
}

func residentOff(t *testing.T, o *memOff) int {
	n := resident(t, o.slots)
	for _, c := range o.chunks {
		n += resident(t, c)
	}
	return n
}

// TestFlushedIndexReleased: once an index's keys are in runs and no Reader
// holds it, its memory goes back to the operating system (the spare kept
// for the next handover is not resident); the flusher's sort buffer stays
// resident for the next flush; the next index filling from the spare finds
// it empty.
func TestFlushedIndexReleased(t *testing.T) {
	s := mustOpen(t, "s", Options{FS: vfs.NewMem(), MemTableSize: 1 << 20})
	defer mustClose(t, s)
	batch := s.NewBatch()
	put := func(c uint64) {
		for j := range uint64(1000) {
			batch.Put(1, keyOf(c, j), 0)
		}
		if _, err := s.Commit(batch, State{Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// Two handovers: the second reuses the first index if it was released.
	c := uint64(0)
	for range 2 * s.memKeys / 1000 {
		put(c)
		c++
	}
	waitFlushed(t, s)
	spare := s.spare.Load()
	if spare == nil {
		t.Fatal("no spare index after a flush no Reader held")
	}
	if n := residentOff(t, spare.off); n != 0 {
		t.Fatalf("the flushed index keeps %d bytes resident", n)
	}
	if n := resident(t, s.flushBuf); n == 0 {
		t.Fatalf("sort buffer: none of %d bytes resident after the flush", len(s.flushBuf))
	}
	if n := residentOff(t, s.active.off); n == 0 {
		t.Fatal("the active index holds keys but no resident page: mincore sees nothing")
	}
	// The released index is empty to a stale read, and serves the next
	// handover correctly.
	if _, ok := spare.get(1, keyOf(0, 1)); ok {
		t.Fatal("a released index still answers")
	}
	for range s.memKeys/1000 + 1 {
		put(c)
		c++
	}
	for i := range c {
		if _, ok, err := s.Get(1, keyOf(i, 999)); err != nil || !ok {
			t.Fatalf("key %d: %v, found %t", i, err, ok)
		}
	}
}

// TestIndexesRecycledEveryFlush: with a Reader refreshed at every commit,
// as the stage does, the store cycles through a few indexes however many
// handovers there are, and every one that is neither active nor being
// flushed holds no resident page (an index reused once was never
// recycled again: each later handover mapped a new one and the old ones
// stayed resident until the collector ran).
func TestIndexesRecycledEveryFlush(t *testing.T) {
	s := mustOpen(t, "s", Options{FS: vfs.NewMem(), MemTableSize: 1 << 20})
	defer mustClose(t, s)
	var rd Reader
	defer rd.Close()
	seen := map[*memIndex]bool{}
	batch := s.NewBatch()
	const handovers = 24
	for c := range uint64(handovers * s.memKeys / 1000) {
		if err := s.OpenReader(&rd); err != nil {
			t.Fatal(err)
		}
		for j := range uint64(1000) {
			batch.Put(1, keyOf(c, j), 0)
		}
		if _, err := s.Commit(batch, State{Generation: 1}); err != nil {
			t.Fatal(err)
		}
		// Let a flush end before the next commit, as it does when the
		// flusher keeps up: on a loaded machine a handover otherwise found
		// the last flushed index still unpublished and mapped another (9
		// for 24 handovers under two parallel test runs), which is correct
		// behaviour this test is not about.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			s.viewMu.RLock()
			seen[s.active] = true
			flushing := s.imm != nil
			s.viewMu.RUnlock()
			if !flushing {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a flush did not end within 30 s")
			}
		}
	}
	waitFlushed(t, s)
	if err := s.OpenReader(&rd); err != nil { // releases what it held
		t.Fatal(err)
	}
	if len(seen) > 4 {
		t.Fatalf("%d indexes for %d handovers: flushed indexes are not reused", len(seen), handovers)
	}
	s.viewMu.RLock()
	active, imm := s.active, s.imm
	s.viewMu.RUnlock()
	for m := range seen {
		if m == active || m == imm {
			continue
		}
		if n := residentOff(t, m.off); n != 0 {
			t.Fatalf("an index neither active nor flushing keeps %d bytes resident", n)
		}
	}
}

// TestRunFiltersOffHeapFreed: the run filters a store keeps in memory live
// off the Go heap, resident (OffHeap counts them), and each is unmapped
// as soon as its run has left the registry and the last Reader holding the
// run let go of it: not when the collector runs (it is off here), and not
// before (a Reader that saw the run still probes its filter).
func TestRunFiltersOffHeapFreed(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	s := mustOpen(t, "s", Options{FS: vfs.NewMem(), MemTableSize: 4 << 20})
	defer mustClose(t, s)
	before := OffHeap()[MemRunFilters]
	old := fillIndexes(t, s, 1, 0, 2)
	fillIndexes(t, s, 2, 2, 2)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFlushed(t, s)
	var rd Reader
	defer rd.Close()
	if err := s.OpenReader(&rd); err != nil {
		t.Fatal(err)
	}
	var gen1 []*memFilter
	var gen1IDs []uint64
	var kept int64
	for g, runs := range s.runs.Load().gens {
		for _, r := range runs {
			f := r.filter
			if f == nil || f.mem == nil {
				t.Fatalf("run %d of generation %d (%d keys): filter not kept off the heap", r.id, g, r.keys)
			}
			if n := resident(t, f.f); n < len(f.f)*9/10 {
				t.Fatalf("run %d: %d of its filter's %d bytes resident", r.id, n, len(f.f))
			}
			kept += int64(len(f.f))
			if g == 1 {
				gen1 = append(gen1, f)
				gen1IDs = append(gen1IDs, r.id)
			}
		}
	}
	if len(gen1) == 0 {
		t.Fatal("no run in generation 1")
	}
	if got := OffHeap()[MemRunFilters]; got.Mapped-before.Mapped < kept || got.Resident-before.Resident < kept*9/10 {
		t.Fatalf("OffHeap: run filters %+v (before %+v), want %d more bytes mapped and resident", got, before, kept)
	}
	if err := s.Expire(2); err != nil {
		t.Fatal(err)
	}
	waitFlushed(t, s)
	if len(s.runs.Load().of(1)) != 0 {
		t.Fatal("generation 1 still has runs after its expiry")
	}
	// The Reader opened before the expiry still holds generation 1's runs:
	// their filters must still answer (a freed one reads as zeros: every
	// key absent).
	for _, f := range gen1 {
		if f.mem.freed.Load() {
			t.Fatal("a filter was unmapped while a Reader holds its run")
		}
	}
	var key [bucketKeyLen]byte
	for _, h := range old[:100] {
		found := false
		for i, f := range gen1 {
			putRunKey(key[:], 1, gen1IDs[i], h)
			found = found || f.mayContain(key[:])
		}
		if !found {
			t.Fatal("a filter held by a Reader lost a key of its run")
		}
	}
	if err := rd.Refresh(); err != nil {
		t.Fatal(err)
	}
	for _, f := range gen1 {
		if !f.mem.freed.Load() {
			t.Fatal("a filter of an expired run is still mapped after the last Reader let go of it")
		}
	}
	if got := OffHeap()[MemRunFilters]; got.Mapped-before.Mapped >= kept {
		t.Fatalf("OffHeap: run filters %+v after the expiry, %d before it", got, kept)
	}
}

// TestIndexTableWrittenBeforeProbes: a new index's table, and a released
// one's once reset for the next handover, is written before the first
// probe reads it, so no probe maps the shared zero page that the first
// write then faults out again (with a TLB shootdown to the other cores):
// reading the whole table faults (almost) no page. On 4 KiB pages, where
// every untouched page would fault once on that read.
func TestIndexTableWrittenBeforeProbes(t *testing.T) {
	defer func(h bool) { hugeRegions = h }(hugeRegions)
	hugeRegions = false
	minflt := func() int64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return ru.Minflt
	}
	m := newMemIndex(0, 1<<18)
	check := func(what string) {
		t.Helper()
		f0 := minflt()
		var sum uint64
		for i := 0; i < len(m.slots); i += 512 { // a slot per 4 KiB page
			sum += m.slots[i]
		}
		if n := minflt() - f0; n > 16 || sum != 0 {
			t.Fatalf("%s: reading its table of %d pages faulted %d times (sum %d)", what, len(m.slots)/512, n, sum)
		}
	}
	check("a new index")
	es := make([]entry, 10_000)
	for i := range es {
		es[i] = entry{gen: 1, h: keyOf(1, uint64(i))}
	}
	m.putAll(es)
	m.release()
	m.reset(0)
	check("a released index reset for the next handover")
	if _, ok := m.get(1, keyOf(1, 5)); ok {
		t.Fatal("a reset index still answers")
	}
}
