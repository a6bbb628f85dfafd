package statestore

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"

	"github.com/dedupstream/dedupstream/partition"
)

// The keys TestBlockReadMatchesPebble commits (blockTestKeys, in
// generations 1, 2, ... of blockTestPerGen keys) and bulk loads
// (blockTestLoadKeys into generation blockTestLoadGen).
const (
	blockTestKeys, blockTestPerGen = 30000, 10000
	blockTestLoadKeys              = 5000
	blockTestLoadGen               = 9
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
			for c := uint64(0); c < blockTestKeys; c += 1000 {
				b := s.NewBatch()
				for j := c; j < c+1000; j++ {
					b.Put(1+j/blockTestPerGen, keyOf(1, j), j+7)
				}
				if _, err := s.Commit(b, State{Generation: 1 + c/blockTestPerGen}); err != nil {
					t.Fatal(err)
				}
			}
			// A bulk load into a generation of its own.
			b := s.NewBatch()
			for j := range uint64(blockTestLoadKeys) {
				b.Put(blockTestLoadGen, keyOf(2, j), j+7)
			}
			if _, err := s.Load(b, State{Generation: blockTestLoadGen}); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := s.settle(); err != nil {
				t.Fatal(err)
			}
			checkBlockReads(t, s, vm, fencesAsRead)
			mustClose(t, s)
			s = mustOpen(t, "db", opts)
			defer mustClose(t, s)
			checkBlockReads(t, s, vm, fencesAsRead)
			checkBlockReads(t, s, vm, fencesEarly)
			checkBlockReads(t, s, vm, fencesTight)
		})
	}
}

// Fences checkBlockReads gives the runs.
const (
	fencesAsRead = iota // from the index separators, as the store reads them
	// fencesEarly gives each block the next one's fence: a read that lands
	// a block early moves on to the next.
	fencesEarly
	// fencesTight gives each block the top bits of its last key's hash,
	// the least fence it may have: a read of a key with the same top bits
	// must not skip the block.
	fencesTight
)

// checkBlockReads reads every key of the store's runs, and as many absent
// ones, through each run's blocks and through Pebble, and compares.
func checkBlockReads(t *testing.T, s *Store, vm bool, fences int) {
	t.Helper()
	rs := s.runs.Load()
	var br blockRead
	var key [bucketKeyLen]byte
	runs, found, probes, fallbacks := 0, 0, 0, 0
	for g, gr := range rs.gens {
		for _, r := range gr {
			runs++
			if r.blocks == nil || len(r.blocks.files) == 0 {
				t.Fatalf("run %d of generation %d has no blocks", r.id, g)
			}
			rb := r.blocks
			switch fences {
			case fencesEarly:
				rb = &runBlocks{open: rb.open}
				for _, bf := range r.blocks.files {
					bf.fences = append(bf.fences[1:len(bf.fences):len(bf.fences)], bf.fences[len(bf.fences)-1])
					rb.files = append(rb.files, bf)
				}
			case fencesTight:
				rb = tightFences(t, s, r)
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
				probes++
				v, f, ok, err := s.lookupBlocks(&br, rb, key[:], h)
				if err != nil {
					t.Fatalf("run %d: key (%d, %d): %v", r.id, i, j, err)
				}
				if !ok {
					// Past the run's last pack, in a block of its
					// filter too large to read here: Pebble reads it.
					fallbacks++
					return
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
			// The keys of the run's generation, and as many absent ones.
			i, from, to := uint64(1), (g-1)*blockTestPerGen, min(g*blockTestPerGen, blockTestKeys)
			if g == blockTestLoadGen {
				i, from, to = 2, 0, blockTestLoadKeys
			}
			for j := from; j < to; j++ {
				probe(i, j)
				probe(99, j)
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := int(blockTestKeys + blockTestLoadKeys); found != want {
		t.Fatalf("found %d keys in %d runs through their blocks, want %d", found, runs, want)
	}
	if fallbacks*100 > probes {
		t.Fatalf("%d of %d reads fell back to Pebble", fallbacks, probes)
	}
}

// TestBlockReadChecksum: a run block with one bit flipped (read through
// the run's own descriptor, not Pebble's) fails its checksum, and the read
// returns the store's fatal error, as Pebble's corruption does
// (TestReadCorruptionIsFatal); an unchecked block would answer "absent".
func TestBlockReadChecksum(t *testing.T) {
	fs := &sstReadFS{FS: vfs.NewMem(), onRead: func(p []byte) {
		if len(p) >= 1024 && len(p) <= maxOwnBlock {
			p[len(p)/2] ^= 0x10
		}
	}}
	s := readRuns(t, fs)
	fs.armed.Store(true)
	err := within(t, "Lookup of a run with a flipped bit", func() error {
		for i := range uint64(20000) {
			if _, _, _, err := s.Lookup(keyOf(1, i), []uint64{1}); err != nil {
				return err
			}
		}
		return nil
	})
	checkFatalCall(t, s, "Lookup", err, "checksum mismatch")
	fs.armed.Store(false)
}

// tightFences returns r's blocks with each block's fence the top 32 bits of its
// last pack's last hash (blocks without packs keep theirs).
func tightFences(t *testing.T, s *Store, r run) *runBlocks {
	t.Helper()
	rb := r.blocks
	out := &runBlocks{open: rb.open}
	var br blockRead
	var key [bucketKeyLen]byte
	putRunKey(key[:], r.gen, r.id, partition.Hash{})
	tight := 0
	for _, bf := range rb.files {
		bf.fences = slices.Clone(bf.fences)
		for i := range bf.fences {
			off, n := bf.offs[i], int(bf.offs[i+1]-bf.offs[i])
			if n > maxOwnBlock {
				continue
			}
			data := alignedBytes(&br.buf, n)
			if _, err := bf.f.ReadAt(data, int64(off)); err != nil {
				t.Fatal(err)
			}
			_, _, frow, err := br.seek(s.blockSchema, data[:n-5], key[:])
			if err != nil {
				t.Fatal(err)
			}
			if frow == 0 {
				continue
			}
			cols := len(s.blockSchema.ColumnTypes)
			p, err := decodePack(br.dec.BlockDecoder().RawBytes(cols + dataColValue).At(frow - 1))
			if err != nil {
				t.Fatal(err)
			}
			bf.fences[i] = uint32(p.hash(p.n-1).Hi >> 32)
			tight++
		}
		out.files = append(out.files, bf)
	}
	if tight == 0 {
		t.Fatal("no block holds a pack")
	}
	return out
}

// TestBlockReadSplitLoad: a bulk load large enough to be written as two
// sstables (one per hash half) is read from both files' blocks.
func TestBlockReadSplitLoad(t *testing.T) {
	opts := testOptions(vfs.NewMem())
	opts.MemTableSize = 8 << 20
	s := mustOpen(t, "db", opts)
	defer mustClose(t, s)
	hs := make([]partition.Hash, loadSplitKeys+4000)
	for j := range hs {
		hs[j] = keyOf(3, uint64(j))
	}
	if _, err := s.LoadHashes(1, hs, nil, State{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	runs := s.runs.Load().of(1)
	if len(runs) != 1 || runs[0].blocks == nil || len(runs[0].blocks.files) != 2 {
		t.Fatalf("runs %+v: want one run in two files, read from its blocks", runs)
	}
	var br blockRead
	var key [bucketKeyLen]byte
	for j, h := range hs {
		putRunKey(key[:], 1, runs[0].id, h)
		_, found, ok, err := s.lookupBlocks(&br, runs[0].blocks, key[:], h)
		if err != nil || !ok || !found {
			t.Fatalf("key %d: found %t, read here %t, err %v", j, found, ok, err)
		}
		h2 := keyOf(98, uint64(j))
		putRunKey(key[:], 1, runs[0].id, h2)
		if _, found, _, err := s.lookupBlocks(&br, runs[0].blocks, key[:], h2); err != nil || found {
			t.Fatalf("absent key %d: found %t, err %v", j, found, err)
		}
	}
}

// TestFirstFenceAtLeast: the search from an interpolated guess finds the
// block a bisection finds, for fences spread evenly (the guess is close),
// bunched at either end (the guess is far), with runs of equal fences, the
// run's end fence (all ones) and x at, between and beyond the fences.
func TestFirstFenceAtLeast(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 300).Draw(rt, "n")
		shape := rapid.SampledFrom([]string{"even", "low", "high", "dups"}).Draw(rt, "shape")
		fences := make([]uint32, n)
		for i := range fences {
			switch shape {
			case "even":
				fences[i] = uint32((uint64(i) + 1) << 32 / uint64(n+1))
			case "low":
				fences[i] = rapid.Uint32Range(0, 1000).Draw(rt, "f")
			case "high":
				fences[i] = rapid.Uint32Range(^uint32(0)-1000, ^uint32(0)).Draw(rt, "f")
			case "dups":
				fences[i] = rapid.Uint32Range(0, 3).Draw(rt, "f") << 30
			}
		}
		slices.Sort(fences)
		if rapid.Bool().Draw(rt, "end") {
			fences[n-1] = ^uint32(0)
		}
		var x uint32
		if rapid.Bool().Draw(rt, "at") {
			x = fences[rapid.IntRange(0, n-1).Draw(rt, "i")] + uint32(rapid.IntRange(-1, 1).Draw(rt, "d"))
		} else {
			x = rapid.Uint32().Draw(rt, "x")
		}
		if fences[n-1] < x {
			return // the caller reads the next file
		}
		want, _ := slices.BinarySearch(fences, x)
		if got := firstFenceAtLeast(fences, x); got != want {
			rt.Fatalf("fences %v, x %d: block %d, want %d", fences, x, got, want)
		}
	})
}
