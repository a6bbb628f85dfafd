package statestore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dedupstream/dedupstream/partition"
)

// BenchmarkRunFilterWriter adds the keys of one 10M-key run, in run order,
// to a run filter sized for them, at a leaf's bits per key and a large
// run's, as the table writer does (key: the run key written, then AddKey
// through the pebble.FilterWriter interface) and as the pack writer does
// (hash: addHash): ns/key of the filter alone.
func BenchmarkRunFilterWriter(b *testing.B) {
	const n = 10_000_000
	rng := rand.New(rand.NewPCG(5, 6))
	hs := make([]partition.Hash, n)
	for i := range hs {
		hs[i] = partition.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}
	}
	slices.SortFunc(hs, func(a, b partition.Hash) int { return cmpU64(a.Hi, b.Hi) })
	for _, bits := range []uint64{runFilterBitsPerKey, runFilterBitsLarge} {
		for _, path := range []string{"key", "hash"} {
			b.Run(fmt.Sprintf("bits=%d/%s", bits, path), func(b *testing.B) {
				var key [bucketKeyLen]byte
				var cpu int64
				for b.Loop() {
					start := cpuTime()
					f := runFilter{keys: n, bits: bits}
					if path == "key" {
						w := f.NewWriter(pebble.TableFilter)
						for _, h := range hs {
							putRunKey(key[:], 3, 9, h)
							w.AddKey(key[:])
						}
						_ = w.Finish(nil)
					} else {
						w := f.newWriter()
						for _, h := range hs {
							w.addHash(h)
						}
						_ = w.Finish(nil)
					}
					cpu += int64(cpuTime() - start)
				}
				b.ReportMetric(float64(cpu)/float64(b.N*n), "cpu-ns/key")
			})
		}
	}
}
