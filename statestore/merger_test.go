package statestore

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// fillIndexes commits n full indexes of fresh keys in generation gen and
// returns the keys.
func fillIndexes(t *testing.T, s *Store, gen uint64, first, n int) []partition.Hash {
	t.Helper()
	var keys []partition.Hash
	for c := first; c < first+n; c++ {
		b := s.NewBatch()
		for j := range s.memKeys {
			h := keyOf(uint64(5000+c), j)
			b.Put(gen, h, 0)
			keys = append(keys, h)
		}
		if _, err := s.Commit(b, State{Generation: gen}); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func mustFind(t *testing.T, s *Store, gen uint64, keys []partition.Hash, what string) {
	t.Helper()
	for i, h := range keys {
		if _, found, err := s.Get(gen, h); err != nil || !found {
			t.Fatalf("%s: key %d of generation %d: found %t, %v", what, i, gen, found, err)
		}
	}
}

// mustHoldExactly fails t unless generation gen of s holds keys and no
// other key: each found, and a scan counting as many.
func mustHoldExactly(t *testing.T, s *Store, gen uint64, keys []partition.Hash, what string) {
	t.Helper()
	mustFind(t, s, gen, keys, what)
	n := 0
	if err := s.ScanGeneration(gen, func(partition.Hash, uint64) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != len(keys) {
		t.Fatalf("%s: generation %d holds %d keys, want %d", what, gen, n, len(keys))
	}
}

// TestFlushNotBehindMerge: while a merge runs (here: the merger is held),
// Commits that fill index after index go on; their flushes do not wait for
// the merger. Before the merger, a flush's merges ran on the worker ahead
// of the next flush, and the handover waited for them.
func TestFlushNotBehindMerge(t *testing.T) {
	s := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer mustClose(t, s)
	release := make(chan struct{})
	s.mg.w.post(func() { <-release })
	done := make(chan []partition.Hash)
	go func() { done <- fillIndexes(t, s, 1, 0, 3*s.merge.fanout) }()
	var keys []partition.Hash
	select {
	case keys = <-done:
	case <-time.After(60 * time.Second):
		close(release)
		t.Fatal("commits of 3 x fanout indexes did not finish while the merger was busy")
	}
	close(release)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	mustFind(t, s, 1, keys, "after the merges")
	if runs := len(s.runs.Load().of(1)); runs >= 3*s.merge.fanout {
		t.Errorf("%d runs after the merger ran, want merged", runs)
	}
}

// TestMergeBesideFlush: a merge records its run while a flush that began
// before it is still writing; the flush's registry must keep the merged run
// (and not the inputs the merge removed), in memory and after a reopen.
func TestMergeBesideFlush(t *testing.T) {
	s, opts, keys, release := heldMerge(t)
	fan := s.merge.fanout
	inFlush, resume := make(chan struct{}), make(chan struct{})
	s.hooks.flushWritten = func() {
		s.hooks.flushWritten = nil
		close(inFlush)
		<-resume
	}
	keys = append(keys, fillIndexes(t, s, 1, fan, 1)...) // its flush stops at the hook
	<-inFlush
	close(release)
	// The merge records its run while the flush is held.
	deadline := time.Now().Add(60 * time.Second)
	for len(s.runs.Load().of(1)) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("merge not recorded: %d runs", len(s.runs.Load().of(1)))
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(resume)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	mustFind(t, s, 1, keys, "after the flush")
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = mustOpen(t, "db", opts)
	defer mustClose(t, s)
	mustFind(t, s, 1, keys, "after a reopen")
}

// TestMergeOfExpiredGeneration: a generation expires while a merge of its
// runs is writing; the merged run must not be recorded (nor ingested):
// the registry holds no run below the floor, in memory and after a reopen.
func TestMergeOfExpiredGeneration(t *testing.T) {
	fs := vfs.NewMem()
	opts := testOptions(fs)
	s := mustOpen(t, "db", opts)
	inMerge, resume := make(chan struct{}), make(chan struct{})
	s.hooks.mergeWritten = func() {
		s.hooks.mergeWritten = nil
		close(inMerge)
		<-resume
	}
	fillIndexes(t, s, 1, 0, s.merge.fanout)
	<-inMerge
	live := fillIndexes(t, s, 2, 100, 1)
	if err := s.Expire(2); err != nil {
		t.Fatal(err)
	}
	if err := s.settleFlushes(); err != nil { // the floor is recorded
		t.Fatal(err)
	}
	close(resume)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store, what string) {
		t.Helper()
		for g, runs := range s.runs.Load().gens {
			if g < 2 {
				t.Errorf("%s: %d runs of expired generation %d in the registry", what, len(runs), g)
			}
		}
		mustFind(t, s, 2, live, what)
	}
	check(s, "after the merge")
	mustClose(t, s)
	s = mustOpen(t, "db", opts)
	defer mustClose(t, s)
	check(s, "after a reopen")
}

// TestRunFilterBitsBySize: a flush's runs (leaves) keep filters of
// runFilterBitsPerKey bits per key, a merge's run one of
// runFilterBitsLarge (its keys, a generation's oldest, are probed least),
// and every key is still found in the merged run, before and after a
// reopen (which reads the smaller filter back from its chunks).
func TestRunFilterBitsBySize(t *testing.T) {
	s, opts, keys, release := heldMerge(t)
	fan := s.merge.fanout
	sizeOf := func(r run) (got, want int, bits uint64) {
		bits = runFilterBits(r.keys, s.memKeys)
		return len(r.filter.f), int(runFilterBlocks(r.keys, bits))*runFilterBlockBytes + runFilterTrailer, bits
	}
	leaves := s.runs.Load().of(1)
	if len(leaves) != fan {
		t.Fatalf("%d runs before the merge, want %d leaves", len(leaves), fan)
	}
	for _, r := range leaves {
		if got, want, bits := sizeOf(r); bits != runFilterBitsPerKey || got != want {
			t.Fatalf("leaf run %d of %d keys: filter of %d bytes at %d bits per key, want %d bytes at %d", r.id, r.keys, got, bits, want, runFilterBitsPerKey)
		}
	}
	close(release)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	merged := s.runs.Load().of(1)
	if len(merged) != 1 {
		t.Fatalf("%d runs after the merge, want 1", len(merged))
	}
	r := merged[0]
	if got, want, bits := sizeOf(r); bits != runFilterBitsLarge || got != want {
		t.Fatalf("merged run of %d keys: filter of %d bytes at %d bits per key, want %d bytes at %d", r.keys, got, bits, want, runFilterBitsLarge)
	}
	mustFind(t, s, 1, keys, "in the merged run")
	mustClose(t, s)
	s = mustOpen(t, "db", opts)
	defer mustClose(t, s)
	r = s.runs.Load().of(1)[0]
	if r.filter == nil {
		t.Fatal("reopened: the merged run's filter was not read back")
	}
	if got, want, _ := sizeOf(r); got != want {
		t.Fatalf("reopened: filter of %d bytes, want %d", got, want)
	}
	mustFind(t, s, 1, keys, "after a reopen")
}

// heldMerge opens a store on a memory file system and fills generation 1
// with one merge's fan of leaves, all flushed; the merge they make due
// waits until release is closed.
func heldMerge(t *testing.T) (s *Store, opts Options, keys []partition.Hash, release chan struct{}) {
	t.Helper()
	opts = testOptions(vfs.NewMem())
	s = mustOpen(t, "db", opts)
	release = make(chan struct{})
	s.mg.w.post(func() { <-release })
	keys = fillIndexes(t, s, 1, 0, s.merge.fanout)
	if err := s.settleFlushes(); err != nil {
		t.Fatal(err)
	}
	return s, opts, keys, release
}

// TestReaderHoldsRunsDuringMerge: a Reader that refreshes while a merge is
// recorded but not yet published captures the merge's inputs from the
// published set, and must get their filters and blocks: the registry lets
// go of them only once the set without them is published. When it let go
// before, such a Reader read those runs through Pebble alone, and a race
// of that kind lost a key (TestBudgetBoundsIndexes, about 1 run in 700).
func TestReaderHoldsRunsDuringMerge(t *testing.T) {
	s := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer mustClose(t, s)
	var checked int
	var missing []uint64
	s.hooks.mergeRecorded = func() {
		var rd Reader
		if err := s.OpenReader(&rd); err != nil {
			t.Error(err)
			return
		}
		for _, ri := range rd.its {
			if ri.filter == nil || ri.blocks == nil {
				missing = append(missing, ri.id)
			}
		}
		checked++
		if err := rd.Close(); err != nil {
			t.Error(err)
		}
	}
	keys := fillIndexes(t, s, 1, 0, 2*s.merge.fanout)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no merge was recorded")
	}
	if len(missing) > 0 {
		t.Fatalf("a Reader opened while a merge was recorded lacked the filter or blocks of runs %v", missing)
	}
	mustFind(t, s, 1, keys, "after the merges")
}
