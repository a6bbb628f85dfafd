package statestore

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/filter"
	"github.com/dedupstream/dedupstream/partition"
)

// TestRunFilter: a run filter answers "maybe" for every key written into
// it, run keys and other keys alike, and "no" for all but about 1 % of the
// keys it does not hold (10 bits per key), also when it was sized for
// fewer keys than the writer adds up to (a merge sizes it for the sum of
// its inputs, which may repeat keys) or for many more.
func TestRunFilter(t *testing.T) {
	for _, c := range []struct {
		sized, added int
		meta         bool   // also add as many keys that are not run keys
		v1           bool   // the filter of tables written before v2
		bits         uint64 // bits per key (0: runFilterBitsPerKey)
	}{{100_000, 100_000, false, false, 0}, {200_000, 100_000, true, false, 0}, {400_000, 100_000, false, false, 0}, {1, 3, true, false, 0}, {0, 50, false, false, 0},
		{100_000, 100_000, false, true, 0}, {200_000, 100_000, true, true, 0},
		{100_000, 100_000, false, false, runFilterBitsLarge}, {200_000, 100_000, true, false, runFilterBitsLarge}} {
		t.Run(fmt.Sprintf("sized=%d/added=%d/meta=%t/v1=%t/bits=%d", c.sized, c.added, c.meta, c.v1, c.bits), func(t *testing.T) {
			p := runFilter{keys: uint64(c.sized), v1: c.v1, bits: c.bits}
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
			reader := runFilter{v1: c.v1} // reads need no size
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
			// A Bloom filter of b bits per key and k probes: (1 -
			// e^(-k/b))^k (0.82 % at 10 bits, 2.3 % at 8); a blocked
			// filter pays a little for its one cache line per key.
			// (Plus a few hits: at 32 bits the rate is ~1e-5.)
			bits := c.bits
			if bits == 0 {
				bits = runFilterBitsPerKey
			}
			if got, want := len(f), int(runFilterBlocks(uint64(c.sized), bits))*runFilterBlockBytes+runFilterTrailer; got != want {
				t.Fatalf("filter of %d bytes, want %d (%d bits for each of %d keys)", got, want, bits, c.sized)
			}
			if _, k, ok := runFilterShape(f); !ok || k != runFilterProbesFor(bits) {
				t.Fatalf("filter shape: %d probes, ok %t; want %d probes at %d bits per key", k, ok, runFilterProbesFor(bits), bits)
			}
			limit := 1.5*bloomRateK(float64(bits)*float64(c.sized)/float64(added), float64(runFilterProbesFor(bits))) + 5.0/probes
			t.Logf("false-positive rate %.4f", float64(fp)/probes)
			if rate := float64(fp) / probes; rate > limit {
				t.Errorf("false-positive rate %.4f, want <= %.3f", rate, limit)
			}
		})
	}
}

// TestRunFilterBesideFront: the keys the stage asks the store about are
// mostly false positives of its Bloom front, and the run filter takes its
// block from the same high hash bits as the front: it must still turn away
// all but about 1 % of them, as it does for keys at random.
func TestRunFilterBesideFront(t *testing.T) {
	const n = 200_000
	front, err := filter.New(filter.Config{KeysPerGeneration: n, Generations: 1, FalsePositiveRate: 0.01}, 1)
	if err != nil {
		t.Fatal(err)
	}
	w := runFilter{keys: n}.NewWriter(pebble.TableFilter)
	var k [bucketKeyLen]byte
	for i := range n {
		h := keyOf(1, uint64(i))
		front.Add(h)
		putRunKey(k[:], 1, 1, h)
		w.AddKey(k[:])
	}
	f := w.Finish(nil)
	var fronted, fp int
	for i := 0; fronted < 20_000; i++ {
		h := keyOf(2, uint64(i))
		if !front.Test(h) {
			continue
		}
		fronted++
		putRunKey(k[:], 1, 1, h)
		if (runFilter{}).MayContain(pebble.TableFilter, f, k[:]) {
			fp++
		}
	}
	rate := float64(fp) / float64(fronted)
	t.Logf("run filter false positives among %d front false positives: %.4f", fronted, rate)
	if limit := 2 * bloomRate(float64(runFilterBitsPerKey)); rate > limit {
		t.Errorf("run filter passes %.4f of the front's false positives, want <= %.4f", rate, limit)
	}
}

// bloomRate is the false-positive rate of an unblocked Bloom filter of
// bitsPerKey bits per key and runFilterProbes probes.
func bloomRate(bitsPerKey float64) float64 { return bloomRateK(bitsPerKey, runFilterProbes) }

// bloomRateK is bloomRate with k probes per key.
func bloomRateK(bitsPerKey, k float64) float64 {
	return math.Pow(1-math.Exp(-k/bitsPerKey), k)
}

// TestRunFilterUsedByReads: the runs a store writes carry the run filter
// and reads consult it: absent keys end at the filter instead of reading a
// data block. The store that wrote a run holds its filter in memory, and a
// miss there never enters Pebble (no block is read, not even the filter
// block); after a reopen Pebble's copy in the sstable answers (Pebble
// counts a filter hit).
func TestRunFilterUsedByReads(t *testing.T) {
	opts := testOptions(vfs.NewMem())
	s := mustOpen(t, "db", opts)
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
	} else if rs.of(1)[0].filter == nil {
		t.Fatal("the run's filter is not in memory")
	}
	const probes = 2000
	probe := func(s *Store) {
		t.Helper()
		for i := range probes {
			if _, found, err := s.Get(1, keyOf(2, uint64(i))); err != nil || found {
				t.Fatalf("absent key %d: found %t, %v", i, found, err)
			}
		}
	}
	// Open the Get reader first: opening iterators reads blocks.
	if _, _, err := s.Get(1, keyOf(1, 0)); err != nil {
		t.Fatal(err)
	}
	m0 := s.db.Metrics()
	probe(s)
	m1 := s.db.Metrics()
	if d := m1.Filter.Hits + m1.Filter.Misses - m0.Filter.Hits - m0.Filter.Misses; d != 0 {
		t.Errorf("%d probes reached Pebble's filter, want 0 (the filter in memory answers)", d)
	}
	if d := m1.BlockCache.Hits + m1.BlockCache.Misses - m0.BlockCache.Hits - m0.BlockCache.Misses; d > probes/20 {
		t.Errorf("%d block reads for %d absent keys, want <= %d", d, probes, probes/20)
	}
	for i := range n {
		if _, found, err := s.Get(1, keyOf(1, uint64(i))); err != nil || !found {
			t.Fatalf("key %d: found %t, %v", i, found, err)
		}
	}
	mustClose(t, s)
	s = mustOpen(t, "db", opts)
	defer mustClose(t, s)
	// Runs carry no Pebble filter (layout 3): Open reads each run's filter
	// back into memory, and absent keys end there again.
	if rs := s.runs.Load(); len(rs.of(1)) == 0 || rs.of(1)[0].filter == nil {
		t.Fatal("after a reopen the run's filter is not in memory")
	}
	if _, _, err := s.Get(1, keyOf(1, 0)); err != nil {
		t.Fatal(err)
	}
	m0 = s.db.Metrics()
	probe(s)
	m1 = s.db.Metrics()
	if d := m1.BlockCache.Hits + m1.BlockCache.Misses - m0.BlockCache.Hits - m0.BlockCache.Misses; d > probes/20 {
		t.Errorf("after a reopen %d block reads for %d absent keys, want <= %d", d, probes, probes/20)
	}
}

// BenchmarkRunFilterWrite: the filter writer's cost per key as a run
// writes it, keys in hash order, for a leaf run (1M keys, the sweep's
// 64 MiB index) and a merge of eight, v1 (block from a mix of both hash
// words) against v2 (block from the high bits).
func BenchmarkRunFilterWrite(b *testing.B) {
	for _, n := range []int{1 << 20, 8 << 20} {
		keys := make([][bucketKeyLen]byte, n)
		hs := make([]partition.Hash, n)
		for i := range hs {
			hs[i] = keyOf(1, uint64(i))
		}
		slices.SortFunc(hs, func(x, y partition.Hash) int {
			if c := cmpU64(x.Hi, y.Hi); c != 0 {
				return c
			}
			return cmpU64(x.Lo, y.Lo)
		})
		for i, h := range hs {
			putRunKey(keys[i][:], 1, 1, h)
		}
		for _, v1 := range []bool{true, false} {
			b.Run(fmt.Sprintf("keys=%s/v1=%t", countName(n), v1), func(b *testing.B) {
				for b.Loop() {
					w := runFilter{keys: uint64(n), v1: v1}.NewWriter(pebble.TableFilter)
					for i := range keys {
						w.AddKey(keys[i][:])
					}
					_ = w.Finish(nil)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/key")
			})
		}
	}
}

// TestRunFilterPrefetchBlock: the block a Reader prefetches for a hash
// (memFilter.blockOf) is the one mayContain then reads, for filters of
// both sizes: with that block cleared, no key the run holds is found any
// more, while every other block's keys still are.
func TestRunFilterPrefetchBlock(t *testing.T) {
	for _, bits := range []uint64{runFilterBitsPerKey, runFilterBitsLarge} {
		t.Run(fmt.Sprintf("bits=%d", bits), func(t *testing.T) {
			const n = 20_000
			var mf *memFilter
			w := runFilter{keys: n, bits: bits, keep: &mf}.NewWriter(pebble.TableFilter)
			var k [bucketKeyLen]byte
			for i := range n {
				putRunKey(k[:], 4, 9, keyOf(2, uint64(i)))
				w.AddKey(k[:])
			}
			w.Finish(nil)
			defer mf.drop()
			for i := range 200 {
				h := keyOf(2, uint64(i))
				off, ok := mf.blockOf(h)
				if !ok {
					t.Fatal("blockOf: not a filter this code wrote")
				}
				mf.prefetch(h) // never faults, changes nothing
				putRunKey(k[:], 4, 9, h)
				if !mf.mayContain(k[:]) {
					t.Fatalf("key %d written but the filter says no", i)
				}
				saved := [runFilterBlockBytes]byte(mf.f[off : off+runFilterBlockBytes])
				clear(mf.f[off : off+runFilterBlockBytes])
				if mf.mayContain(k[:]) {
					t.Fatalf("key %d: found with block %d cleared: blockOf names another block than the probe reads", i, off/runFilterBlockBytes)
				}
				other := keyOf(2, uint64(n-1-i))
				if o, _ := mf.blockOf(other); o != off {
					putRunKey(k[:], 4, 9, other)
					if !mf.mayContain(k[:]) {
						t.Fatalf("key %d: not found once block %d of another key was cleared", n-1-i, off/runFilterBlockBytes)
					}
				}
				copy(mf.f[off:], saved[:])
			}
		})
	}
}

// TestRunFilterAddHash: the pack writer's addHash sets exactly the bits
// AddKey sets for the run keys of the same hashes, so that reads, which
// probe with the run key (filterHash), find every hash written.
func TestRunFilterAddHash(t *testing.T) {
	const n = 5000
	rng := rand.New(rand.NewPCG(11, 12))
	byKey := runFilter{keys: n}.newWriter()
	byHash := runFilter{keys: n}.newWriter()
	var key [bucketKeyLen]byte
	hs := make([]partition.Hash, n)
	for i := range hs {
		hs[i] = partition.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}
		putRunKey(key[:], 3, 9, hs[i])
		byKey.AddKey(key[:])
		byHash.addHash(hs[i])
	}
	a, b := byKey.Finish(nil), byHash.Finish(nil)
	if !bytes.Equal(a, b) {
		t.Fatal("addHash and AddKey of the same keys set different bits")
	}
	f := runFilter{}
	for _, h := range hs {
		putRunKey(key[:], 3, 9, h)
		if !f.MayContain(pebble.TableFilter, b, key[:]) {
			t.Fatalf("hash %v added by addHash: the filter misses its run key", h)
		}
	}
}
