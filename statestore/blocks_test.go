package statestore

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestBlockReadMatchesPebble: every run the store writes (flushes, merges,
// a bulk load) and every run it finds at Open gets its blocks, and a read of
// a run's blocks (blocks.go) answers every key, present or absent, as a
// seek of Pebble's iterator over the same run does, versions included.
func TestBlockReadMatchesPebble(t *testing.T) {
	for _, vm := range []bool{false, true} {
		t.Run(fmt.Sprintf("version=%t", vm), func(t *testing.T) {
			opts := testOptions(vfs.NewMem())
			opts.VersionMode = vm
			s := mustOpen(t, "db", opts)
			const n, perGen = 30000, 10000
			for c := uint64(0); c < n; c += 1000 {
				b := s.NewBatch()
				for j := c; j < c+1000; j++ {
					b.Put(1+j/perGen, keyOf(1, j), j+7)
				}
				if _, err := s.Commit(b, State{Generation: 1 + c/perGen}); err != nil {
					t.Fatal(err)
				}
			}
			// A bulk load into a generation of its own.
			b := s.NewBatch()
			for j := uint64(0); j < 5000; j++ {
				b.Put(9, keyOf(2, j), j+7)
			}
			if _, err := s.Load(b, State{Generation: 9}); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := s.settle(); err != nil {
				t.Fatal(err)
			}
			checkBlockReads(t, s, n, perGen, vm)
			mustClose(t, s)
			s = mustOpen(t, "db", opts)
			defer mustClose(t, s)
			checkBlockReads(t, s, n, perGen, vm)
		})
	}
}

// checkBlockReads reads every key of the store's runs, and as many absent
// ones, through each run's blocks and through Pebble, and compares.
func checkBlockReads(t *testing.T, s *Store, n, perGen uint64, vm bool) {
	t.Helper()
	rs := s.runs.Load()
	var br blockRead
	var key [bucketKeyLen]byte
	runs, found := 0, 0
	for g, gr := range rs.gens {
		for _, r := range gr {
			runs++
			if r.blocks == nil || len(r.blocks.files) == 0 {
				t.Fatalf("run %d of generation %d has no blocks", r.id, g)
			}
			it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: runStart(g, r.id), UpperBound: filterStart(g, r.id)})
			if err != nil {
				t.Fatal(err)
			}
			probe := func(i, j uint64) {
				h := keyOf(i, j)
				putRunKey(key[:], g, r.id, h)
				wv, wf, err := lookupPack(it, key[:], h)
				if err != nil {
					t.Fatal(err)
				}
				v, f, ok, err := s.lookupBlocks(&br, r.blocks, key[:], h)
				if err != nil || !ok {
					t.Fatalf("run %d: key (%d, %d): read here %t, err %v", r.id, i, j, ok, err)
				}
				if f != wf || v != wv {
					t.Fatalf("run %d: key (%d, %d): found %t version %d, Pebble found %t version %d", r.id, i, j, f, v, wf, wv)
				}
				if f {
					found++
					if vm && v != j+7 {
						t.Fatalf("key (%d, %d): version %d, want %d", i, j, v, j+7)
					}
				}
			}
			for j := range n {
				probe(1, j)
				probe(99, j) // absent
			}
			for j := range uint64(5000) {
				probe(2, j)
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := int(n) + 5000; found != want {
		t.Fatalf("found %d keys in %d runs through their blocks, want %d", found, runs, want)
	}
}
