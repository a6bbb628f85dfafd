package statestore

import (
	"maps"
	"slices"
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
	opts.MemTableSize = minMemTableSize // 2340 keys per index (memKeysFor): many runs, merges
	s := mustOpen(t, "st", opts)
	const commits, perCommit, markAt, floor = 40, 1200, 24, 2
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
	if s.runs.Load().next <= mark.NextRun+uint64(s.merge.fanout) {
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

// sinceChunks commits chunks of one index's worth of fresh keys each
// (every Commit hands the index over: one leaf run per chunk) into gen,
// waits until the flusher and its merges are idle, and returns the keys.
func sinceChunks(t *testing.T, s *Store, gen uint64, first, chunks int) map[partition.Hash]bool {
	t.Helper()
	keys := map[partition.Hash]bool{}
	for c := first; c < first+chunks; c++ {
		b := s.NewBatch()
		for j := range s.memKeys {
			h := keyOf(uint64(1000+c), j)
			b.Put(gen, h, 0)
			keys[h] = true
		}
		if _, err := s.Commit(b, State{Generation: gen}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// scanSinceBounded checks that ScanSince(m) visits every key of since and
// at most two indexes' worth of keys more (the indexes in memory at the
// Mark, whose runs are written after it).
func scanSinceBounded(t *testing.T, s *Store, m Mark, since map[partition.Hash]bool) {
	t.Helper()
	seen := map[partition.Hash]bool{}
	n, err := s.ScanSince(m, func(_ uint64, h partition.Hash) error {
		seen[h] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for h := range since {
		if !seen[h] {
			t.Fatalf("ScanSince missed key %v, committed after the mark", h)
		}
	}
	if bound := len(since) + 2*int(s.memKeys); n > bound {
		t.Fatalf("ScanSince visited %d keys for %d committed since the mark (bound %d): "+
			"a run made since the mark holds older keys", n, len(since), bound)
	}
	t.Logf("visited %d keys for %d committed since the mark", n, len(since))
}

// TestScanSinceBarrier checks that merges keep runs made since the last
// Mark (or since Open) apart from older ones, so that ScanSince from that
// Mark reads only what was written since, and that it skips runs merged
// since the Mark from older runs only. Without the barrier the first leaf
// after the Mark would be merged with the three older leaves of its tier,
// and that run with the three older runs of the next tier: ScanSince would
// read all 19 indexes' worth of keys instead of 4.
func TestScanSinceBarrier(t *testing.T) {
	setup := func(t *testing.T) (vfs.FS, Options, *Store) {
		fs := vfs.NewCrashableMem()
		opts := testOptions(fs)
		opts.MemTableSize = minMemTableSize
		s := mustOpen(t, "st", opts)
		// 15 leaves: three runs of tier 1 (4 leaves each) and three of tier 0.
		sinceChunks(t, s, 1, 0, 15)
		if got := len(s.runs.Load().of(1)); got != 6 {
			t.Fatalf("%d runs after 15 leaves, want 6 (3 merged, 3 leaves)", got)
		}
		return fs, opts, s
	}
	t.Run("mark", func(t *testing.T) {
		_, _, s := setup(t)
		defer mustClose(t, s)
		m := s.Mark()
		scanSinceBounded(t, s, m, sinceChunks(t, s, 1, 15, 4))
	})
	t.Run("reopen after kill", func(t *testing.T) {
		// The barrier is not stored: Open starts it at the registry's next
		// run id, which no Mark saved before the crash exceeds.
		fs, opts, s := setup(t)
		m := s.Mark()
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		opts.FS = fs.(*vfs.MemFS).CrashClone(vfs.CrashCloneCfg{})
		r := mustOpen(t, "st", opts)
		defer mustClose(t, r)
		mustClose(t, s)
		scanSinceBounded(t, r, m, sinceChunks(t, r, 1, 15, 4))
	})
	t.Run("old runs merged since the mark", func(t *testing.T) {
		fs := vfs.NewCrashableMem()
		opts := testOptions(fs)
		opts.MemTableSize = minMemTableSize
		s := mustOpen(t, "st", opts)
		defer mustClose(t, s)
		sinceChunks(t, s, 1, 0, 2)
		m1 := s.Mark()
		since1 := sinceChunks(t, s, 1, 2, 2)
		if got := len(s.runs.Load().of(1)); got != 4 {
			t.Fatalf("%d runs, want 4 leaves (two on each side of the first mark)", got)
		}
		m := s.Mark()
		// This leaf's flush merges the four older leaves: a run made
		// after m holding only keys from before it.
		since := sinceChunks(t, s, 1, 4, 1)
		rs := s.runs.Load().of(1)
		if len(rs) != 2 || rs[1].id < m.NextRun || rs[1].hi >= m.NextRun || rs[0].lo < m.NextRun {
			t.Fatalf("runs %+v: want a run merged since the mark from older leaves, and the new leaf", rs)
		}
		scanSinceBounded(t, s, m, since)
		// From the older mark the merged run is mixed (leaves from before
		// and after m1): ScanSince must read it whole.
		maps.Copy(since1, since)
		seen := map[partition.Hash]bool{}
		if _, err := s.ScanSince(m1, func(_ uint64, h partition.Hash) error {
			seen[h] = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for h := range since1 {
			if !seen[h] {
				t.Fatalf("ScanSince from the older mark missed key %v, committed after it", h)
			}
		}
	})
}

// TestDecodeRunsEncoding1 checks that a run registry written before leaf
// ranges (encoding 1) still opens, each run reading as possibly holding
// leaves up to its own id.
func TestDecodeRunsEncoding1(t *testing.T) {
	v1 := []byte{runsEncodingV1, 9, 2, 3, 7, 100, 120, 3, 8, 50, 90}
	rs, err := decodeRuns(v1)
	if err != nil {
		t.Fatal(err)
	}
	want := []run{{gen: 3, id: 8, keys: 50, bytes: 90, lo: 0, hi: 8}, {gen: 3, id: 7, keys: 100, bytes: 120, lo: 0, hi: 7}}
	if rs.next != 9 || !slices.Equal(rs.of(3), want) {
		t.Fatalf("decoded next %d runs %+v, want 9 %+v", rs.next, rs.of(3), want)
	}
	// Encoding 2 round-trips the leaf ranges.
	rs.gens[3][0].lo, rs.gens[3][0].hi = 8, 8
	back, err := decodeRuns(rs.encode())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.of(3), rs.of(3)) || back.next != rs.next {
		t.Fatalf("round trip: %+v, want %+v", back.of(3), rs.of(3))
	}
	if _, err := decodeRuns([]byte{3, 0, 0}); err == nil {
		t.Fatal("a registry of an unknown encoding decoded")
	}
}
