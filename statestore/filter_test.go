package statestore

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestRunFilter: a run filter answers "maybe" for every key written into
// it, run keys and other keys alike, and "no" for all but about 1 % of the
// keys it does not hold (10 bits per key), also when it was sized for
// fewer keys than the writer adds up to (a merge sizes it for the sum of
// its inputs, which may repeat keys) or for many more.
func TestRunFilter(t *testing.T) {
	for _, c := range []struct {
		sized, added int
		meta         bool // also add as many keys that are not run keys
	}{{100_000, 100_000, false}, {200_000, 100_000, true}, {400_000, 100_000, false}, {1, 3, true}, {0, 50, false}} {
		t.Run(fmt.Sprintf("sized=%d/added=%d/meta=%t", c.sized, c.added, c.meta), func(t *testing.T) {
			p := runFilter{keys: uint64(c.sized)}
			w := p.NewWriter(pebble.TableFilter)
			var k [bucketKeyLen]byte
			for i := range c.added {
				putRunKey(k[:], 4, 9, keyOf(1, uint64(i)))
				w.AddKey(k[:])
				if c.meta {
					w.AddKey([]byte(fmt.Sprintf("meta-%d", i)))
				}
			}
			f := w.Finish(nil)
			var reader runFilter // reads need no size
			for i := range c.added {
				putRunKey(k[:], 4, 9, keyOf(1, uint64(i)))
				if !reader.MayContain(pebble.TableFilter, f, k[:]) {
					t.Fatalf("key %d written but the filter says no", i)
				}
				if c.meta && !reader.MayContain(pebble.TableFilter, f, []byte(fmt.Sprintf("meta-%d", i))) {
					t.Fatalf("meta key %d written but the filter says no", i)
				}
			}
			added := c.added
			if c.meta {
				added *= 2
			}
			if c.sized < added {
				return // overfilled: no rate promised
			}
			const probes = 200_000
			fp := 0
			for i := range probes {
				putRunKey(k[:], 4, 9, keyOf(2, uint64(i)))
				if reader.MayContain(pebble.TableFilter, f, k[:]) {
					fp++
				}
			}
			// Pebble's Bloom filter at 10 bits per key: ~1 %; a blocked
			// filter pays a little for its one cache line per key.
			limit := 0.015
			if c.sized >= 2*added {
				limit = 0.002
			}
			t.Logf("false-positive rate %.4f", float64(fp)/probes)
			if rate := float64(fp) / probes; rate > limit {
				t.Errorf("false-positive rate %.4f, want <= %.3f", rate, limit)
			}
		})
	}
}

// TestRunFilterUsedByReads: the runs a store writes carry the run filter
// and reads consult it: absent keys end at the filter (Pebble counts a
// filter hit) instead of reading a data block.
func TestRunFilterUsedByReads(t *testing.T) {
	opts := testOptions(vfs.NewMem())
	s := mustOpen(t, "db", opts)
	defer mustClose(t, s)
	const n = 20_000
	b := s.NewBatch()
	for i := range n {
		b.Put(1, keyOf(1, uint64(i)), 0)
	}
	if _, err := s.Commit(b, State{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if rs := s.runs.Load(); len(rs.of(1)) == 0 {
		t.Fatal("no run written")
	}
	before := s.db.Metrics().Filter
	const probes = 2000
	for i := range probes {
		if _, found, err := s.Get(1, keyOf(2, uint64(i))); err != nil || found {
			t.Fatalf("absent key %d: found %t, %v", i, found, err)
		}
	}
	for i := range n {
		if _, found, err := s.Get(1, keyOf(1, uint64(i))); err != nil || !found {
			t.Fatalf("key %d: found %t, %v", i, found, err)
		}
	}
	after := s.db.Metrics().Filter
	if hits := after.Hits - before.Hits; hits < probes*9/10 {
		t.Errorf("%d of %d absent keys ended at a run filter, want >= 90 %%", hits, probes)
	}
}
