package statestore

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// TestScanSince checks that ScanSince visits every key committed after a
// Mark, in memory, in runs flushed since and in runs merged since, skips
// expired generations, and does not visit the runs made before the Mark.
// The read-only reopen of a crash clone holds the commit log's tail in
// memory, so the memory part is checked without a race with the flusher.
func TestScanSince(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := testOptions(fs)
	opts.MemTableSize = 72 << 10 // 1280 keys per index (memKeysFor): many runs, merges
	s := mustOpen(t, "st", opts)
	const commits, perCommit, markAt, floor = 40, 500, 24, 2
	genOf := func(i uint64) uint64 { return 1 + i/10 } // generations 1..4
	var mark Mark
	stored := map[partition.Hash]uint64{}
	want := map[partition.Hash]uint64{} // committed after the mark, live
	for i := uint64(1); i <= commits; i++ {
		b := s.NewBatch()
		n := uint64(perCommit)
		if i == commits {
			n = 100 // short of a handover: the crash clone replays it
		}
		for j := range n {
			h := keyOf(i, j)
			b.Put(genOf(i), h, 0)
			stored[h] = genOf(i)
			if i > markAt && genOf(i) >= floor {
				want[h] = genOf(i)
			}
		}
		if _, err := s.Commit(b, State{Generation: genOf(i)}); err != nil {
			t.Fatal(err)
		}
		if i == markAt {
			mark = s.Mark()
			if mark.Seq != markAt {
				t.Fatalf("Mark().Seq = %d after %d commits", mark.Seq, markAt)
			}
		}
		if i == markAt+4 {
			if err := s.Expire(floor); err != nil {
				t.Fatal(err)
			}
		}
	}
	if s.runs.Load().next <= mark.NextRun+mergeFanout {
		t.Fatalf("only %d runs made since the mark: the test needs flushes and merges", s.runs.Load().next-mark.NextRun)
	}
	check := func(t *testing.T, s *Store) {
		t.Helper()
		seen := map[partition.Hash]bool{}
		n, err := s.ScanSince(mark, func(gen uint64, h partition.Hash) error {
			g, ok := stored[h]
			switch {
			case !ok:
				t.Fatalf("ScanSince visited a key never committed: %v", h)
			case g != gen:
				t.Fatalf("ScanSince visited key %v in generation %d, committed in %d", h, gen, g)
			case gen < floor:
				t.Fatalf("ScanSince visited key %v of the expired generation %d", h, gen)
			}
			seen[h] = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for h, g := range want {
			if !seen[h] {
				t.Fatalf("ScanSince missed key %v of generation %d, committed after the mark", h, g)
			}
		}
		// The runs of generation 2 made before the mark hold keys no later
		// commit touched: a scan of whole generations would visit them.
		if live := (commits-floor*10+10)*perCommit - (perCommit - 100); n >= live {
			t.Fatalf("ScanSince visited %d keys, the store holds %d live: not bounded by the work since the mark", n, live)
		}
		t.Logf("visited %d keys for %d committed since the mark", n, len(want))
	}
	t.Run("open", func(t *testing.T) { check(t, s) })
	t.Run("crash clone, read-only", func(t *testing.T) {
		if err := s.Flush(); err != nil { // syncs the commit log
			t.Fatal(err)
		}
		clone := fs.CrashClone(vfs.CrashCloneCfg{})
		ro := opts
		ro.FS, ro.ReadOnly = clone, true
		r := mustOpen(t, "st", ro)
		defer mustClose(t, r)
		if r.active.len() == 0 {
			t.Fatal("the reopened store replayed no commit log: the memory part is not checked")
		}
		check(t, r)
	})
	mustClose(t, s)
}
