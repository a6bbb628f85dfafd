package statestore

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestLongLivedReader keeps one Reader across many commits, handovers,
// merges and an expiry, refreshing it after every commit as the stage does
// per batch: every committed key stays found in its generation, absent keys
// are not, and the Reader holds exactly one iterator per live run (the
// iterators of merged and expired runs are closed). A second Reader opened
// midway and never refreshed still finds every key committed before it
// opened: it pins the runs it saw.
func TestLongLivedReader(t *testing.T) {
	s := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer mustClose(t, s)
	var rd, frozen Reader
	defer rd.Close()
	defer frozen.Close()
	const commits, perCommit = 80, 1000
	genOf := func(c uint64) uint64 { return 1 + c/20 }
	b := s.NewBatch()
	floor := uint64(0)
	sawMerge := false
	frozenAt := uint64(0)
	for c := uint64(0); c < commits; c++ {
		for j := uint64(0); j < perCommit; j++ {
			b.Put(genOf(c), keyOf(c, j), 0)
		}
		if _, err := s.Commit(b, State{Generation: genOf(c)}); err != nil {
			t.Fatal(err)
		}
		if c == 60 {
			if err := s.Expire(2); err != nil {
				t.Fatal(err)
			}
			floor = 2
		}
		if err := s.OpenReader(&rd); err != nil {
			t.Fatal(err)
		}
		if c == 30 {
			if err := s.OpenReader(&frozen); err != nil {
				t.Fatal(err)
			}
			frozenAt = c
		}
		nruns := 0
		for _, runs := range rd.runs.gens {
			nruns += len(runs)
			if len(runs) > 0 && runs[0].keys > s.memKeys {
				sawMerge = true
			}
		}
		if len(rd.its) != nruns {
			t.Fatalf("commit %d: %d iterators for %d runs", c, len(rd.its), nruns)
		}
		for k := uint64(0); k <= c; k += 3 {
			j := (k * 7919) % perCommit
			gen, _, found, err := rd.Lookup(keyOf(k, j), []uint64{genOf(k)})
			if err != nil {
				t.Fatal(err)
			}
			if want := genOf(k) >= floor; found != want || (found && gen != genOf(k)) {
				t.Fatalf("after commit %d: key %d/%d of generation %d: found %t in %d, want %t", c, k, j, genOf(k), found, gen, want)
			}
			if _, _, found, _ := rd.Lookup(keyOf(k+1000, j), []uint64{genOf(k)}); found {
				t.Fatalf("after commit %d: absent key found", c)
			}
		}
		if frozen.IsOpen() && floor == 0 {
			for k := uint64(0); k <= frozenAt; k += 5 {
				if _, _, found, err := frozen.Lookup(keyOf(k, 17), []uint64{genOf(k)}); err != nil || !found {
					t.Fatalf("after commit %d: the reader opened at commit %d lost key %d: %t %v", c, frozenAt, k, found, err)
				}
			}
		}
	}
	if !sawMerge {
		t.Fatal("no merged run: the test did not exercise merges")
	}
}

// TestMemIndexReuse: a flushed index is reused for a later one only once
// no Reader holds it; until then a Reader that saw its keys in memory keeps
// finding them there.
func TestMemIndexReuse(t *testing.T) {
	s := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer mustClose(t, s)
	b := s.NewBatch()
	fill := func(c uint64) {
		// Commits of 500 keys until the active index is handed over.
		for first := s.active; s.active == first; c++ {
			for j := uint64(0); j < 500; j++ {
				b.Put(1, keyOf(c, j), 0)
			}
			if _, err := s.Commit(b, State{Generation: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var rd Reader
	if err := s.OpenReader(&rd); err != nil {
		t.Fatal(err)
	}
	first := s.active
	fill(0)
	waitFlushed(t, s)
	if s.spare.Load() != nil {
		t.Fatal("an index a Reader holds was offered for reuse")
	}
	fill(1000)
	waitFlushed(t, s)
	if s.active == first {
		t.Fatal("an index a Reader holds was reused")
	}
	// rd's view: first in memory, none of its runs.
	for c := uint64(0); c < 5; c++ {
		if _, _, found, err := rd.Lookup(keyOf(c, 3), []uint64{1}); err != nil || !found {
			t.Fatalf("the held index lost key %d: %t %v", c, found, err)
		}
	}
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	if s.spare.Load() != first {
		t.Fatal("the released index was not offered for reuse")
	}
	fill(2000)
	s.viewMu.RLock()
	reused := s.imm == first || s.active == first
	s.viewMu.RUnlock()
	if !reused {
		t.Fatal("the offered index was not reused")
	}
	waitFlushed(t, s)
	for _, c := range []uint64{0, 1000, 2000} {
		if _, found, err := s.Get(1, keyOf(c, 3)); err != nil || !found {
			t.Fatalf("key %d lost: %t %v", c, found, err)
		}
	}
	if _, found, _ := s.Get(1, keyOf(5000, 3)); found {
		t.Fatal("absent key found")
	}
}

// TestDiskUsageCountsCommitLogs: the commit logs are part of DiskUsage.
func TestDiskUsageCountsCommitLogs(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "db", testOptions(fs))
	defer mustClose(t, s)
	b := s.NewBatch()
	for j := uint64(0); j < 1000; j++ {
		b.Put(1, keyOf(1, j), 0)
	}
	if _, err := s.Commit(b, State{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	nums, err := listLogs(fs, "db")
	if err != nil || len(nums) == 0 {
		t.Fatalf("no commit log: %v", err)
	}
	fi, err := fs.Stat(fs.PathJoin("db", logName(nums[len(nums)-1])))
	if err != nil || fi.Size() < 1000*16 {
		t.Fatalf("commit log: %v, %v", fi, err)
	}
	if got, pebbleOnly := s.DiskUsage(), s.db.Metrics().DiskSpaceUsage(); got < pebbleOnly+uint64(fi.Size()) {
		t.Fatalf("DiskUsage %d, want at least Pebble's %d plus the log's %d", got, pebbleOnly, fi.Size())
	}
}
