package statestore

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

// BenchmarkRunFilterWriter adds the keys of one 10M-key run, in run order,
// to a run filter sized for them (the table writer's AddKey calls):
// ns/key of the filter alone.
func BenchmarkRunFilterWriter(b *testing.B) {
	const n = 10_000_000
	rng := rand.New(rand.NewPCG(5, 6))
	hs := make([]partition.Hash, n)
	for i := range hs {
		hs[i] = partition.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}
	}
	slices.SortFunc(hs, func(a, b partition.Hash) int { return cmpU64(a.Hi, b.Hi) })
	var key [bucketKeyLen]byte
	var cpu int64
	for b.Loop() {
		start := cpuTime()
		w := runFilter{keys: n}.NewWriter(0)
		for _, h := range hs {
			putRunKey(key[:], 3, 9, h)
			w.AddKey(key[:])
		}
		_ = w.Finish(nil)
		cpu += int64(cpuTime() - start)
	}
	b.ReportMetric(float64(cpu)/float64(b.N*n), "cpu-ns/key")
}
