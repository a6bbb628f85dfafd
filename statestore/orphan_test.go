package statestore

import (
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// TestOrphanRunIDReused: a crash between a flush's ingest and the batch
// recording its run leaves an orphan, which Open deletes with a range
// deletion; its sstable stays until Pebble compacts it away. The next run
// written in that generation must not take the orphan's id (the registry's
// next): a later Open finds a run's files by its key range and read the
// orphan's with it, whose keys were never committed ("key 20 of the orphan
// run found"). Only the new run's keys are found, after every reopen.
func TestOrphanRunIDReused(t *testing.T) {
	base := newCloneableMem()
	opts := testOptions(base)
	opts.DisableWAL = true // the orphan's keys are lost with the crash
	// Pebble does not compact the orphan's table away before the store
	// reopens (a large store's compactions take their time).
	opts.tune = func(po *pebble.Options) { po.DisableAutomaticCompactions = true }
	s, lost := crashWithOrphan(t, mustOpen(t, "db", opts), base, &opts, 1, 0)
	check := func(s *Store, keys []partition.Hash, what string) {
		t.Helper()
		for i, h := range lost {
			if _, found, err := s.Get(1, h); err != nil || found {
				t.Fatalf("%s: key %d of the orphan run found (%t, %v): it was never committed", what, i, found, err)
			}
		}
		mustHoldExactly(t, s, 1, keys, what)
	}
	if st := s.State(); st.Seq != 0 {
		t.Fatalf("reopened at seq %d, want 0", st.Seq)
	}
	keys := fillIndexes(t, s, 1, 100, 1)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	check(s, keys, "after the reopen")
	// A crash, before Pebble compacted anything.
	crashed2 := opts.FS.(*cloneableMem).CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 1))})
	mustClose(t, s)
	opts.FS = &cloneableMem{MemFS: crashed2}
	s = mustOpen(t, "db", opts)
	defer mustClose(t, s)
	check(s, keys, "after a second reopen")
}

// TestLoadBlocksSplitRun: after a crash left an orphan run (of generation
// 2), Open's range deletion of it shares a table with the metadata that
// spans the key ranges of generation 1; the next run of generation 1 is
// ingested above it, and compactions (output tables of 64 KiB here, a
// stand-in for runs larger than Pebble's target file size) rewrite it with
// the metadata: one table from the metadata into the run, the run's rest
// in tables of its own. A reopen must find every key of the run: taking
// only the latter tables for the run's files lost the keys of the former
// ("key 3 of generation 1: found false").
func TestLoadBlocksSplitRun(t *testing.T) {
	base := newCloneableMem()
	opts := testOptions(base)
	opts.DisableWAL = true
	opts.tune = func(po *pebble.Options) {
		for i := range po.TargetFileSizes {
			po.TargetFileSizes[i] = 64 << 10
		}
	}
	s, _ := crashWithOrphan(t, mustOpen(t, "db", opts), base, &opts, 2, 0)
	keys := fillIndexes(t, s, 1, 100, 1)
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	split := false
	levels, err := s.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tables := range levels {
		for _, tb := range tables {
			_, _, sok := parseRunOf(tb.Smallest.UserKey)
			g, _, lok := parseRunOf(tb.Largest.UserKey)
			split = split || !sok && lok && g == 1
		}
	}
	if !split {
		t.Fatal("no table holds the metadata and part of the run: the test makes no split run")
	}
	mustClose(t, s)
	s = mustOpen(t, "db", opts)
	defer mustClose(t, s)
	mustHoldExactly(t, s, 1, keys, "after the reopen")
}

// TestOrphanDeletionKeepsRunBlocks: the table that holds an orphan's range
// deletion spans, from the metadata on, the key ranges of the runs before
// the orphan, but holds none of their keys: a reopen still reads those
// runs' blocks itself (counted as shared, they were read through Pebble,
// slower, until Pebble compacted the deletion away).
func TestOrphanDeletionKeepsRunBlocks(t *testing.T) {
	base := newCloneableMem()
	opts := testOptions(base)
	opts.DisableWAL = true
	opts.tune = func(po *pebble.Options) { po.DisableAutomaticCompactions = true }
	s := mustOpen(t, "db", opts)
	keys := fillIndexes(t, s, 1, 0, 1)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	s, _ = crashWithOrphan(t, s, base, &opts, 2, 100) // the reopen deletes the orphan
	if err := s.w.do(func() error { return s.db.Flush() }); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = mustOpen(t, "db", opts)
	defer mustClose(t, s)
	for _, r := range s.runs.Load().of(1) {
		if r.blocks == nil {
			t.Errorf("run %d of generation 1 is read through Pebble", r.id)
		}
	}
	mustFind(t, s, 1, keys, "after the reopens")
}

// crashWithOrphan fills an index of generation gen in s (keys from first
// on) and crashes s right after its flush wrote the run, before the run
// was recorded (a clone of base keeping nothing unsynced), then reopens on
// the clone (setting opts.FS). The run is an orphan, which the reopen
// deletes; its keys were never committed.
func crashWithOrphan(t *testing.T, s *Store, base *cloneableMem, opts *Options, gen uint64, first int) (*Store, []partition.Hash) {
	t.Helper()
	var crashed *vfs.MemFS
	s.hooks.flushWritten = func() {
		s.hooks.flushWritten = nil
		crashed = base.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 1))})
	}
	lost := fillIndexes(t, s, gen, first, 1)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	if crashed == nil {
		t.Fatal("no flush reached its hook")
	}
	opts.FS = &cloneableMem{MemFS: crashed}
	return mustOpen(t, "db", *opts), lost
}
