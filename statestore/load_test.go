package statestore

import (
	"math/rand/v2"
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
