package statestore

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// runPacks returns the packs of run r in order, read from Pebble directly
// (not through runCursor, the code under test), as the hashes of each.
func runPacks(t *testing.T, s *Store, r run) [][]partition.Hash {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: runStart(r.gen, r.id), UpperBound: filterStart(r.gen, r.id)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var packs [][]partition.Hash
	for ok := it.First(); ok; ok = it.Next() {
		v := it.Value()
		if len(v) < 1+16 {
			t.Fatalf("pack %x: value of %d bytes", it.Key(), len(v))
		}
		w := 16
		if v[0] == packTagVersions {
			w = 24
		}
		n := (len(v) - 1) / w
		var hs []partition.Hash
		for i := range n {
			hs = append(hs, partition.HashFromBytes(v[1+16*i:]))
		}
		packs = append(packs, hs)
	}
	return packs
}

// noFilters makes rd probe every run by seeking it, so that lookups of
// absent hashes reach the packs instead of ending at the run filters.
func noFilters(rd *Reader) {
	for _, ri := range rd.its {
		ri.filter = nil
	}
}

// TestPackLookupEdges writes runs in packs of 7 and looks up, in every
// pack, its first and last hash (present) and the hashes just outside it:
// one below its first, one above its last, which lie between two packs or
// before the first or after the last of the run (absent). The run filters
// are bypassed so that the absent ones reach the packs.
func TestPackLookupEdges(t *testing.T) {
	for _, vm := range []bool{false, true} {
		t.Run(fmt.Sprintf("versions=%t", vm), func(t *testing.T) {
			opts := testOptions(vfs.NewMem())
			opts.VersionMode = vm
			s := mustOpen(t, "db", opts)
			defer mustClose(t, s)
			b := s.NewBatch()
			const n = 1000
			for i := range uint64(n) {
				b.Put(3, keyOf(5, i), i+1)
			}
			if _, err := s.Commit(b, State{Generation: 3}); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			writeRuns(t, s)
			want := map[partition.Hash]uint64{}
			for i := range uint64(n) {
				want[keyOf(5, i)] = i + 1
			}
			runs := s.runs.Load().of(3)
			if len(runs) != 1 {
				t.Fatalf("%d runs, want 1", len(runs))
			}
			packs := runPacks(t, s, runs[0])
			if len(packs) != (n+testPackKeys-1)/testPackKeys {
				t.Fatalf("%d packs for %d keys in packs of %d", len(packs), n, testPackKeys)
			}
			var rd Reader
			if err := s.OpenReader(&rd); err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			noFilters(&rd)
			gens := []uint64{3}
			check := func(h partition.Hash, present bool, what string) {
				t.Helper()
				g, v, found, err := rd.Lookup(h, gens)
				if err != nil {
					t.Fatal(err)
				}
				if found != present {
					t.Fatalf("%s %x: found %t, want %t", what, h, found, present)
				}
				if found && (g != 3 || (vm && v != want[h])) {
					t.Fatalf("%s %x: generation %d version %d, want 3 and %d", what, h, g, v, want[h])
				}
			}
			for i, p := range packs {
				first, last := p[0], p[len(p)-1]
				check(first, true, fmt.Sprintf("pack %d's first", i))
				check(last, true, fmt.Sprintf("pack %d's last", i))
				for _, h := range p {
					if _, ok := want[h]; !ok {
						t.Fatalf("pack %d holds %x, never written", i, h)
					}
				}
				below, above := first, last
				below.Lo-- // first.Lo > 0 for these keys
				above.Lo++
				if _, ok := want[below]; !ok && (i == 0 || lessHash(&packs[i-1][len(packs[i-1])-1], &below)) {
					check(below, false, fmt.Sprintf("just below pack %d", i))
				}
				if _, ok := want[above]; !ok {
					check(above, false, fmt.Sprintf("just above pack %d", i))
				}
			}
			// Every key, and the scan, through the cursors.
			for h := range want {
				check(h, true, "key")
			}
			seen := 0
			var prev partition.Hash
			err := s.ScanGeneration(3, func(h partition.Hash, v uint64) error {
				if seen > 0 && !lessHash(&prev, &h) {
					return fmt.Errorf("scan out of order: %x after %x", h, prev)
				}
				if w, ok := want[h]; !ok || (vm && v != w) {
					return fmt.Errorf("scan: %x version %d, want present with %d", h, v, w)
				}
				prev = h
				seen++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if seen != n {
				t.Fatalf("scan saw %d keys, want %d", seen, n)
			}
		})
	}
}

// TestPackVersionsNewestWins writes versions of the same keys in several
// runs (three commits, each flushed as a run, overlapping key sets, packs
// of 7) and checks that every read (Lookup, ScanGeneration) returns the
// newest version, before and after the runs are merged and after a
// reopen.
func TestPackVersionsNewestWins(t *testing.T) {
	fs := vfs.NewMem()
	opts := testOptions(fs)
	opts.VersionMode = true
	opts.merge.fanout = 3
	s := mustOpen(t, "db", opts)
	want := map[partition.Hash]uint64{}
	b := s.NewBatch()
	for round := uint64(1); round <= 3; round++ {
		for i := uint64(0); i < 600; i++ {
			if (i+round)%round != 0 && round > 1 {
				continue // round r rewrites every r-th key
			}
			h := keyOf(8, i)
			b.Put(2, h, 100*round+i)
			want[h] = 100*round + i
		}
		if _, err := s.Commit(b, State{Generation: 2}); err != nil {
			t.Fatal(err)
		}
		writeRuns(t, s)
	}
	check := func(s *Store, when string) {
		t.Helper()
		var rd Reader
		if err := s.OpenReader(&rd); err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		gens := []uint64{2}
		for h, w := range want {
			_, v, found, err := rd.Lookup(h, gens)
			if err != nil || !found || v != w {
				t.Fatalf("%s: %x: found %t version %d (%v), want %d", when, h, found, v, err, w)
			}
		}
		n := 0
		if err := s.ScanGeneration(2, func(h partition.Hash, v uint64) error {
			n++
			if v != want[h] {
				return fmt.Errorf("%x: version %d, want %d", h, v, want[h])
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: scan: %v", when, err)
		}
		if n != len(want) {
			t.Fatalf("%s: scan saw %d keys, want %d", when, n, len(want))
		}
	}
	runs := len(s.runs.Load().of(2))
	check(s, fmt.Sprintf("%d runs", runs))
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	if got := len(s.runs.Load().of(2)); got != 1 {
		t.Fatalf("%d runs after the merge of %d, want 1", got, runs)
	}
	check(s, "merged")
	mustClose(t, s)
	s = mustOpen(t, "db", opts)
	defer mustClose(t, s)
	check(s, "reopened")
}

// TestOpenRefusesLayout2 checks that a store of the previous layout is
// refused with an error naming its directory and what to do.
func TestOpenRefusesLayout2(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "db", testOptions(fs))
	if err := s.db.Set(metaFormatKey, []byte{2, 0}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	_, err := Open("db", testOptions(fs))
	if err == nil {
		t.Fatal("a layout-2 store opened")
	}
	for _, w := range []string{"db", "layout 2", "remove the directory", "restores the store from the output topic"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// TestOpenLayout3: a store of layout 3 (run filters of 7 probes, the
// trailer holding only the blocks) opens as it is, with its keys, and is
// recorded as layout 4 at once, so that a layout-3 build refuses it; a
// layout newer than this build's is refused.
func TestOpenLayout3(t *testing.T) {
	fs := vfs.NewMem()
	opts := testOptions(fs)
	s := mustOpen(t, "db", opts)
	keys := fillIndexes(t, s, 1, 0, 2)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFlushed(t, s)
	if err := s.db.Set(metaFormatKey, []byte{3, 0}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = mustOpen(t, "db", opts)
	mustFind(t, s, 1, keys, "layout 3 reopened")
	v, _, err := s.getMeta(metaFormatKey)
	if err != nil || len(v) != 2 || v[0] != layoutVersion {
		t.Fatalf("format record %x after opening layout 3 (%v), want layout %d", v, err, layoutVersion)
	}
	if err := s.db.Set(metaFormatKey, []byte{layoutVersion + 1, 0}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	if _, err := Open("db", opts); err == nil || !strings.Contains(err.Error(), "unsupported layout") {
		t.Fatalf("a store of layout %d opened: %v", layoutVersion+1, err)
	}
}

// TestLoadSplitRunFilter loads a generation big enough to be written as
// two sstables (hash halves, on two goroutines, each building a filter
// that writeLoad combines) and checks that every key is found through the
// run's filter, before and after a reopen (which reads it back), and that
// absent keys mostly end at it.
func TestLoadSplitRunFilter(t *testing.T) {
	// Its filters (64 KiB and more) live off the heap until the closed
	// stores are collected: free them before the next test, whose
	// off-heap accounting is process-wide (TestRunFiltersOffHeapFreed).
	t.Cleanup(func() {
		runtime.GC()
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
	})
	fs := vfs.NewMem()
	opts := testOptions(fs)
	opts.MemTableSize = 4 << 20
	s := mustOpen(t, "db", opts)
	const n = loadSplitKeys + 5000
	b := s.NewBatch()
	for i := range uint64(n) {
		b.Put(4, keyOf(6, i), 0)
	}
	if _, err := s.Load(b, State{Generation: 4}); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store, when string) {
		t.Helper()
		runs := s.runs.Load().of(4)
		if len(runs) != 1 || runs[0].keys != n || runs[0].filter == nil {
			t.Fatalf("%s: want one run of %d keys with its filter in memory, have %+v", when, n, runs)
		}
		for i := range uint64(n) {
			if !runs[0].filter.mayContain(runKeyOf(4, runs[0].id, keyOf(6, i))) {
				t.Fatalf("%s: key %d is not in the run's filter", when, i)
			}
		}
		absent := 0
		for i := range uint64(10000) {
			if runs[0].filter.mayContain(runKeyOf(4, runs[0].id, keyOf(7, i))) {
				absent++
			}
		}
		if absent > 300 {
			t.Fatalf("%s: %d of 10000 absent keys pass the filter", when, absent)
		}
		for i := uint64(0); i < n; i += 97 {
			if _, found, err := s.Get(4, keyOf(6, i)); err != nil || !found {
				t.Fatalf("%s: key %d: found %t, %v", when, i, found, err)
			}
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	check(s, "loaded")
	mustClose(t, s)
	s = mustOpen(t, "db", opts)
	defer mustClose(t, s)
	check(s, "reopened")
}

func runKeyOf(gen, id uint64, h partition.Hash) []byte {
	k := make([]byte, bucketKeyLen)
	putRunKey(k, gen, id, h)
	return k
}
