package statestore

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

// BenchmarkSortLoaded sorts one load buffer's worth of keys (1.4M, the
// default 64 MiB index, one generation, arriving in 10k-key Loads):
//
//   - "chunks": the load's way, each 128k-key chunk sorted as it fills
//     (add, on the loading goroutine) and the chunks merged (sortLoaded, on
//     the flusher): add-ns/key and merge-ns/key split the two;
//   - "whole": the previous way, one sortMem of the whole buffer (copied
//     out first, as the old sortLoaded did).
func BenchmarkSortLoaded(b *testing.B) {
	const n, batch = 1_400_000, 10_000
	rng := rand.New(rand.NewPCG(1, 2))
	es := make([]entry, n)
	for i := range es {
		es[i] = entry{gen: 7, h: partition.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}, version: uint64(i)}
	}
	b.Run("chunks", func(b *testing.B) {
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
