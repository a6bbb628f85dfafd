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
// Loads: each streak fills many buffers (so a load writes runs with their
// state at each full buffer, its durable points, and at its end), and
// crash clones taken in the middle of a streak must reopen at a state
// whose keys are all there and none of a later commit (the buffer being
// filled, and a buffer whose runs are not recorded yet, claim nothing).
func TestCrashConsistencyBulkLoad(t *testing.T) {
	const commits = 1200
	for seed := uint64(1); seed <= soakSeeds(1); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			fs := newCloneableMem()
			opts := testOptions(fs)
			opts.VersionMode = true
			opts.MemTableSize = 32 << 10 // 1024 keys a buffer: runs every ~17 Loads
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
			if s.loadWrites == 0 {
				t.Fatal("no load buffer was written before its load ended: the test does not cover the durable points")
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

// TestLoadNewestVersionWins: a key loaded in several buffers (written as
// runs while the load went on, and the last one still in memory when the
// load ends) keeps the version of its last Load, in version mode,
// whichever buffer held it; and keys of several generations, some split
// into hash halves, all come back.
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
	// 4000 Loads of 3000 keys into buffers of 1024 keys: a few runs of
	// each generation, holding some keys twice.
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if s.loadWrites == 0 {
		t.Fatal("no buffer written before the load ended: the test does not cover keys in several runs")
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
// generations into one buffer, written while loading and at the end.
func TestLoadHashesMatchesLoad(t *testing.T) {
	opts := testOptions(vfs.NewMem())
	opts.VersionMode = true
	opts.MemTableSize = 32 << 10 // ~1k keys a buffer: runs while loading
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
	if viaHashes.loadWrites == 0 {
		t.Fatal("no buffer written before the load ended: the test does not cover full buffers")
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

// TestLoadWritesFullBuffers: a full load buffer is written as runs while
// the load goes on, with the state of its last Load: before the load ends,
// the runs are in the registry (readers do not end the load to find
// them), and a crash then reopens the store at that Load's state with
// every key up to it and none after; the end of the load writes only what
// is left, the last buffer.
func TestLoadWritesFullBuffers(t *testing.T) {
	fs := newCloneableMem()
	opts := testOptions(fs)
	opts.MemTableSize = 32 << 10
	s := mustOpen(t, "db", opts)
	defer mustClose(t, s)
	const gen, perLoad, loads = 2, 100, 35
	durable, filling := 0, 0 // the last Load of a full buffer; keys in the one filling
	for i := 1; i <= loads; i++ {
		hs := make([]partition.Hash, perLoad)
		for j := range hs {
			hs[j] = keyOf(uint64(i), uint64(j))
		}
		if _, err := s.LoadHashes(gen, hs, nil, State{Generation: gen, Checkpoint: checkpointOf(uint64(i))}); err != nil {
			t.Fatal(err)
		}
		if filling += perLoad; uint64(filling) >= s.memKeys {
			durable, filling = i, 0
		}
	}
	if durable < 2 || filling == 0 {
		t.Fatalf("%d keys a buffer: the Loads fill %d, want several and one left filling", s.memKeys, durable)
	}
	if err := s.settleFlushes(); err != nil {
		t.Fatal(err)
	}
	if !s.loading.Load() {
		t.Fatal("the load ended without a read or a Commit")
	}
	var inRuns uint64
	for _, r := range s.runs.Load().of(gen) {
		inRuns += r.keys
	}
	if inRuns != uint64(durable*perLoad) {
		t.Fatalf("before the load ends, its runs hold %d keys, want the %d of its full buffers", inRuns, durable*perLoad)
	}
	check := func(s *Store, last int, what string) {
		t.Helper()
		if st := s.State(); binary.BigEndian.Uint64(st.Checkpoint) != uint64(last) {
			t.Fatalf("%s: state of Load %d, want %d", what, binary.BigEndian.Uint64(st.Checkpoint), last)
		}
		for i := 1; i <= loads; i++ {
			for j := range perLoad {
				_, found, err := s.Get(gen, keyOf(uint64(i), uint64(j)))
				if err != nil {
					t.Fatal(err)
				}
				if found != (i <= last) {
					t.Fatalf("%s: key %d of Load %d found %t, want %t", what, j, i, found, i <= last)
				}
			}
		}
	}
	crashed := mustOpen(t, "db", func() Options { o := opts; o.FS = fs.CrashClone(vfs.CrashCloneCfg{}); return o }())
	check(crashed, durable, "reopened after a crash before the load ended")
	mustClose(t, crashed)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	inRuns = 0
	for _, r := range s.runs.Load().of(gen) {
		inRuns += r.keys
	}
	if inRuns != loads*perLoad {
		t.Fatalf("after the load, its runs hold %d keys, want %d", inRuns, loads*perLoad)
	}
	check(s, loads, "after the load")
}

// TestEmptyLoadThenCommit: a Load of no key (a restore batch of unkeyed
// records) advances the state; the Commit after it, logged and made
// durable by a Flush, must survive a crash. Before, the empty load's state
// stayed in memory, the Commit's Seq followed it in the log, and replay
// stopped at that gap: "recovered checkpoint 1: Seq 1, want durable <=
// checkpoint = Seq <= 3".
func TestEmptyLoadThenCommit(t *testing.T) {
	base := newCloneableMem()
	opts := testOptions(base)
	opts.VersionMode = true
	h := newHistory()
	s := mustOpen(t, "db", opts)
	put := func(i uint64, n int, load bool) {
		t.Helper()
		h.commitGen = append(h.commitGen, 1)
		h.commitKeys = append(h.commitKeys, n)
		h.floorAfter = append(h.floorAfter, nil)
		b := s.NewBatch()
		for j := 0; j < n; j++ {
			b.Put(1, keyOf(i, uint64(j)), i)
		}
		f := s.Commit
		if load {
			f = s.Load
		}
		if st, err := f(b, State{Generation: 1, Checkpoint: checkpointOf(i)}); err != nil || st.Seq != i {
			t.Fatalf("commit %d: %d %v", i, st.Seq, err)
		}
	}
	put(1, 5, false)
	put(2, 0, true)
	put(3, 5, false)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	clone := base.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 1))})
	mustClose(t, s)
	opts.FS = nil
	checkRecovered(t, h, crashPoint{fs: clone, committed: 3, durable: 3}, opts)
}
