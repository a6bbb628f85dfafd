package statestore

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// BenchmarkSortLoaded sorts one load buffer's worth of keys (1.4M, the
// default 64 MiB index, one generation, arriving in 10k-key Loads):
//
//   - "radix": the load's way, the keys appended as they come (add, on the
//     loading goroutine) and the whole buffer radix-sorted (sortLoaded, on
//     the flusher): add-ns/key and merge-ns/key split the two;
//   - "whole": a comparison-free sortMem of the whole buffer (copied out
//     first), the flusher's sort of an index.
func BenchmarkSortLoaded(b *testing.B) {
	const n, batch = 1_400_000, 10_000
	rng := rand.New(rand.NewPCG(1, 2))
	es := make([]entry, n)
	for i := range es {
		es[i] = entry{gen: 7, h: partition.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}, version: uint64(i)}
	}
	b.Run("radix", func(b *testing.B) {
		lb := &loadBuffer{}
		var add, merge int64
		for b.Loop() {
			lb.reset()
			start := cpuTime()
			for i := 0; i < n; i += batch {
				lb.add(es[i:min(n, i+batch)])
			}
			mid := cpuTime()
			if got := sortLoaded(lb); len(got) != n {
				b.Fatalf("%d keys sorted, want %d", len(got), n)
			}
			add, merge = add+int64(mid-start), merge+int64(cpuTime()-mid)
		}
		b.ReportMetric(float64(add)/float64(b.N*n), "add-ns/key")
		b.ReportMetric(float64(merge)/float64(b.N*n), "merge-ns/key")
	})
	b.Run("whole", func(b *testing.B) {
		out := make([]memEntry, n)
		var cpu int64
		for b.Loop() {
			start := cpuTime()
			for i := range es {
				out[i] = memEntry{gen: es[i].gen, h: es[i].h, version: es[i].version}
			}
			sortMem(out)
			cpu += int64(cpuTime() - start)
		}
		b.ReportMetric(float64(cpu)/float64(b.N*n), "sort-ns/key")
	})
}

// TestSortLoadedMatchesReference: sortLoaded against a stable comparison
// sort with the last Load of each key kept, on random keys over uneven
// generations with repeats, reusing one buffer (chunks and scratch) for
// several loads as the store does.
func TestSortLoadedMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	lb := &loadBuffer{}
	for round, n := range []int{1, 70, 5000, 2*loadChunkKeys + 333, 40_000} {
		lb.reset()
		var all []entry
		for len(all) < n {
			batch := make([]entry, 0, 1+rng.IntN(500))
			for len(batch) < cap(batch) && len(all)+len(batch) < n {
				var e entry
				if len(all) > 0 && rng.IntN(5) == 0 {
					e = all[rng.IntN(len(all))] // loaded again
				} else {
					e = entry{gen: []uint64{3, 5, 5, 5, 9, 1 << 40}[rng.IntN(6)], h: partition.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}}
					if rng.IntN(50) == 0 {
						e.h.Hi = 42 // equal high words: order by Lo
					}
				}
				e.version = uint64(len(all) + len(batch) + 1)
				batch = append(batch, e)
			}
			lb.add(batch)
			all = append(all, batch...)
		}
		want := make([]memEntry, len(all))
		for i, e := range all {
			want[i] = memEntry{gen: e.gen, h: e.h, version: e.version}
		}
		slices.SortStableFunc(want, func(a, b memEntry) int { return compareMem(&a, &b) })
		w := 0
		for i := range want {
			if w > 0 && want[w-1].gen == want[i].gen && want[w-1].h == want[i].h {
				want[w-1] = want[i]
				continue
			}
			want[w] = want[i]
			w++
		}
		want = want[:w]
		if got := sortLoaded(lb); !slices.Equal(got, want) {
			t.Fatalf("round %d (%d keys): sortLoaded differs from the reference (%d vs %d keys)", round, n, len(got), len(want))
		}
	}
}

// TestCrashConsistencyBulkLoad is TestCrashConsistency with long streaks of
// Loads: each streak spills more buffers than loadMaxSpills (so a load
// writes runs at its durable point and at its end), and crash clones taken
// in the middle of a streak must reopen at a state whose keys are all
// there and none of a later commit (a spill claims nothing).
func TestCrashConsistencyBulkLoad(t *testing.T) {
	const commits = 1200
	for seed := uint64(1); seed <= soakSeeds(1); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			fs := newCloneableMem()
			opts := testOptions(fs)
			opts.VersionMode = true
			opts.MemTableSize = 32 << 10 // 1024 keys a buffer: a spill every ~17 Loads
			s := mustOpen(t, "db", opts)
			w := &workload{rng: rand.New(rand.NewPCG(seed, 11)), h: newHistory(), loadStreaks: true}
			b := s.NewBatch()
			var points []crashPoint
			for w.committed < commits {
				if err := w.step(s, b); err != nil {
					t.Fatal(err)
				}
				if w.rng.IntN(15) == 0 {
					pc := []int{0, 30, 100}[w.rng.IntN(3)]
					clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pc, RNG: w.rng})
					points = append(points, crashPoint{fs: clone, committed: w.committed, floors: w.floors, durable: w.durable, unsyncedPc: pc})
				}
			}
			if s.spill.capped == 0 {
				t.Fatalf("%d spills written, no load reached loadMaxSpills: the test does not cover its durable point", s.spill.seq)
			}
			mustClose(t, s)
			points = append(points, crashPoint{fs: fs.CrashClone(vfs.CrashCloneCfg{}), committed: w.committed, floors: w.floors, durable: w.committed})
			for _, cp := range points {
				checkRecovered(t, w.h, cp, opts)
			}
			t.Logf("%d crash points checked", len(points))
		})
	}
}

// TestLoadNewestVersionWins: a key loaded in several buffers (spilled, and
// the last one still in memory when the load ends) keeps the version of
// its last Load, in version mode, whichever buffer held it; and keys of
// several generations, some split into hash halves, all come back.
func TestLoadNewestVersionWins(t *testing.T) {
	opts := testOptions(vfs.NewMem())
	opts.VersionMode = true
	opts.MemTableSize = 32 << 10
	s := mustOpen(t, "db", opts)
	defer mustClose(t, s)
	b := s.NewBatch()
	rng := rand.New(rand.NewPCG(3, 4))
	const keys, rounds = 3000, 40
	want := map[partition.Hash]uint64{}
	genOf := map[partition.Hash]uint64{}
	for r := range rounds {
		for range 100 {
			k := uint64(rng.IntN(keys))
			h := keyOf(k, 0)
			gen := 1 + k%3
			if k < 100 {
				gen = 4 // a small generation: one sstable, both halves
			}
			v := uint64(r*1000) + uint64(rng.IntN(1000))
			b.Put(gen, h, v)
			want[h], genOf[h] = v, gen
		}
		if _, err := s.Load(b, State{Generation: 4, Checkpoint: checkpointOf(uint64(r))}); err != nil {
			t.Fatal(err)
		}
	}
	// 4000 Loads of 3000 keys into buffers of 1024 keys: a few spills.
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if s.spill.seq == 0 {
		t.Fatal("no spill written: the test does not cover the merge of spills")
	}
	for h, v := range want {
		got, found, err := s.Get(genOf[h], h)
		if err != nil {
			t.Fatal(err)
		}
		if !found || got != v {
			t.Fatalf("key %v of gen %d: found %t version %d, want the last loaded %d", h, genOf[h], found, got, v)
		}
	}
	n := 0
	for gen := uint64(1); gen <= 4; gen++ {
		if err := s.ScanGeneration(gen, func(partition.Hash, uint64) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n != len(want) {
		t.Fatalf("the store holds %d keys, want %d", n, len(want))
	}
}

// BenchmarkLoadWrite writes one loaded run of 1M sorted keys as
// writeLoadPart does (the store's level-6 writer options and run filter),
// with the data block size of the options and larger ones: CPU ns per key
// of the sstable writer, for the bulk path's choice of options.
func BenchmarkLoadWrite(b *testing.B) {
	const n = 1_000_000
	rng := rand.New(rand.NewPCG(7, 8))
	hs := make([]partition.Hash, n)
	for i := range hs {
		hs[i] = partition.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}
	}
	slices.SortFunc(hs, func(a, b partition.Hash) int {
		if a.Hi != b.Hi {
			return cmpU64(a.Hi, b.Hi)
		}
		return cmpU64(a.Lo, b.Lo)
	})
	fs := vfs.NewMem()
	s := mustOpen(b, "db", testOptions(fs))
	defer mustClose(b, s)
	base := s.po.MakeWriterOptions(6, s.db.TableFormat())
	for _, bs := range []int{0, 16 << 10, 64 << 10} {
		name := "block=default"
		if bs > 0 {
			name = fmt.Sprintf("block=%dk", bs>>10)
		}
		b.Run(name, func(b *testing.B) {
			var cpu int64
			var size int64
			for b.Loop() {
				wo := base
				if bs > 0 {
					wo.BlockSize = bs
				}
				wo.FilterPolicy = runFilter{keys: n}
				f, err := fs.Create("bench.sst", vfs.WriteCategoryUnspecified)
				if err != nil {
					b.Fatal(err)
				}
				start := cpuTime()
				w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), wo)
				var key [bucketKeyLen]byte
				for _, h := range hs {
					putRunKey(key[:], 3, 9, h)
					if err := w.Set(key[:], nil); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
				cpu += int64(cpuTime() - start)
				fi, _ := fs.Stat("bench.sst")
				size = fi.Size()
			}
			b.ReportMetric(float64(cpu)/float64(b.N*n), "cpu-ns/key")
			b.ReportMetric(float64(size)/n, "bytes/key")
		})
	}
}

// TestLoadHashesMatchesLoad: LoadHashes leaves a store exactly as Load of
// the same keys in Batches does, in version mode (versions kept, the last
// load of a key winning, nil versions loading 0) and with Loads of several
// generations into one buffer, spilled and not.
func TestLoadHashesMatchesLoad(t *testing.T) {
	opts := testOptions(vfs.NewMem())
	opts.VersionMode = true
	opts.MemTableSize = 32 << 10 // ~1k keys a buffer: spills
	viaBatch, viaHashes := mustOpen(t, "batch", opts), mustOpen(t, "hashes", opts)
	defer mustClose(t, viaBatch)
	defer mustClose(t, viaHashes)
	b := viaBatch.NewBatch()
	rng := rand.New(rand.NewPCG(5, 6))
	for r := range 60 {
		gen := uint64(3 + rng.IntN(3))
		hs := make([]partition.Hash, 1+rng.IntN(300))
		vs := make([]uint64, len(hs))
		for i := range hs {
			hs[i] = keyOf(uint64(rng.IntN(4000)), 0) // repeats across Loads
			vs[i] = uint64(r*1000 + i + 1)
		}
		if r%7 == 0 {
			vs = nil // no versions: all 0
		}
		for i, h := range hs {
			var v uint64
			if vs != nil {
				v = vs[i]
			}
			b.Put(gen, h, v)
		}
		st := State{Generation: 5, Checkpoint: checkpointOf(uint64(r))}
		if _, err := viaBatch.Load(b, st); err != nil {
			t.Fatal(err)
		}
		if _, err := viaHashes.LoadHashes(gen, hs, vs, st); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := viaHashes.LoadHashes(5, make([]partition.Hash, 2), []uint64{1}, State{}); err == nil {
		t.Fatal("LoadHashes took 1 version for 2 hashes")
	}
	if viaHashes.spill.seq == 0 {
		t.Fatal("no spill written: the test does not cover spilled buffers")
	}
	scan := func(s *Store) map[[2]uint64]uint64 {
		got := map[[2]uint64]uint64{}
		for gen := uint64(3); gen <= 5; gen++ {
			if err := s.ScanGeneration(gen, func(h partition.Hash, v uint64) error {
				got[[2]uint64{gen, h.Hi}] = v
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		return got
	}
	want, got := scan(viaBatch), scan(viaHashes)
	if len(want) < 1000 {
		t.Fatalf("only %d keys loaded: the test loads too few", len(want))
	}
	if len(got) != len(want) {
		t.Fatalf("LoadHashes left %d keys, Load %d", len(got), len(want))
	}
	for k, v := range want {
		if gv, ok := got[k]; !ok || gv != v {
			t.Fatalf("gen %d key %x: LoadHashes left version %d (found %t), Load %d", k[0], k[1], gv, ok, v)
		}
	}
}

// BenchmarkLoadMerge merges what writeLoadPart merges for one generation
// of a 10M-key restore, scaled down: 5 spilled buffers of 400k keys and the
// last buffer of 200k in memory, uniform hashes, 1% of them loaded again
// in a later buffer; CPU ns per key merged (the emit a no-op). A merge by
// blocks of equal top bits, each radix-sorted in cache, measured the same
// as the heap of cursors (45 ns per key, loaded machine), so the heap
// stays.
func BenchmarkLoadMerge(b *testing.B) {
	const spills, perSpill, inMem = 5, 400_000, 200_000
	rng := rand.New(rand.NewPCG(11, 12))
	fs := vfs.NewMem()
	var prev []memEntry
	sorted := func(n int) []memEntry {
		es := make([]memEntry, n)
		for i := range es {
			es[i] = memEntry{gen: 1, h: partition.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}}
			if len(prev) > 0 && rng.IntN(100) == 0 {
				es[i].h = prev[rng.IntN(len(prev))].h
			}
		}
		slices.SortFunc(es, func(a, b memEntry) int { return compareMem(&a, &b) })
		es = slices.CompactFunc(es, func(a, b memEntry) bool { return a.h == b.h })
		prev = es
		return es
	}
	var segs []spillSeg
	var files []vfs.File
	for i := range spills {
		es := sorted(perSpill)
		var buf []byte
		for _, e := range es {
			buf = binary.LittleEndian.AppendUint64(buf, e.h.Hi)
			buf = binary.LittleEndian.AppendUint64(buf, e.h.Lo)
		}
		name := fmt.Sprintf("s%d", i)
		f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		if f, err = fs.Open(name); err != nil {
			b.Fatal(err)
		}
		files = append(files, f)
		segs = append(segs, spillSeg{gen: 1, n: int64(len(es))})
	}
	mem := sorted(inMem)
	var m loadMerge
	var cpu int64
	var keys int
	for b.Loop() {
		start := cpuTime()
		m.reset()
		for i, f := range files {
			m.addFile(f, segs[i], 16, false)
		}
		m.addMem(mem)
		keys = 0
		if err := m.run(func(partition.Hash, uint64) error { keys++; return nil }); err != nil {
			b.Fatal(err)
		}
		cpu += int64(cpuTime() - start)
	}
	b.ReportMetric(float64(cpu)/float64(b.N*keys), "cpu-ns/key")
}

// TestLoadMergeMatchesModel: loadMerge over 1 to 12 sources (spill files
// and a sorted slice, as writeLoadPart adds them), overlapping keys and
// empty sources, against a map model where the newest source's version of a
// hash wins; the hashes come out once each, in order.
func TestLoadMergeMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	fs := vfs.NewMem()
	var m loadMerge // reused across rounds, as a part's halves reuse it
	for round := range 200 {
		k := 1 + round%12
		pool := make([]partition.Hash, 1+rng.IntN(300))
		for i := range pool {
			pool[i] = partition.Hash{Hi: rng.Uint64() >> uint(rng.IntN(3)*30), Lo: rng.Uint64()}
		}
		want := map[partition.Hash]uint64{}
		m.reset()
		for src := range k {
			n := rng.IntN(len(pool) + 1)
			if rng.IntN(6) == 0 {
				n = 0
			}
			es := make([]memEntry, 0, n)
			for range n {
				h := pool[rng.IntN(len(pool))]
				es = append(es, memEntry{h: h, version: uint64(src*1000 + rng.IntN(1000))})
			}
			slices.SortFunc(es, func(a, b memEntry) int { return compareMem(&a, &b) })
			es = slices.CompactFunc(es, func(a, b memEntry) bool { return a.h == b.h })
			for _, e := range es {
				want[e.h] = e.version // later sources are newer
			}
			if src == k-1 && rng.IntN(2) == 0 {
				m.addMem(es)
				continue
			}
			var buf []byte
			for _, e := range es {
				buf = binary.LittleEndian.AppendUint64(buf, e.h.Hi)
				buf = binary.LittleEndian.AppendUint64(buf, e.h.Lo)
				buf = binary.LittleEndian.AppendUint64(buf, e.version)
			}
			name := fmt.Sprintf("m%d-%d", round, src)
			f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(buf); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if f, err = fs.Open(name); err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m.addFile(f, spillSeg{n: int64(len(es))}, 24, true)
		}
		var got []memEntry
		err := m.run(func(h partition.Hash, v uint64) error {
			got = append(got, memEntry{h: h, version: v})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("round %d, %d sources: %d hashes merged, want %d", round, k, len(got), len(want))
		}
		for i, e := range got {
			if i > 0 && !lessHash(&got[i-1].h, &e.h) {
				t.Fatalf("round %d, %d sources: hash %d out of order or repeated", round, k, i)
			}
			if v, ok := want[e.h]; !ok || v != e.version {
				t.Fatalf("round %d, %d sources: hash %v version %d, want the newest source's %d (%t)", round, k, e.h, e.version, v, ok)
			}
		}
	}
}
