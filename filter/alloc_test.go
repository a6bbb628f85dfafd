package filter

import (
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

// TestHotPathAllocatesNothing proves the per-record operations and the
// steady-state Advance allocate nothing, also with a grown generation in
// the window (Add into it allocates only when it grows again).
func TestHotPathAllocatesNothing(t *testing.T) {
	cfg := Config{KeysPerGeneration: 10_000, FalsePositiveRate: 0.01, Generations: 4}
	f := fillWindow(t, cfg)
	for i := range uint64(3 * cfg.KeysPerGeneration) { // grow the oldest generation
		f.AddTo(f.Oldest(), key(nsOther, i))
	}
	if f.grown == 0 {
		t.Fatal("the oldest generation did not grow")
	}
	probes := make([]partition.Hash, 1024)
	for i := range probes {
		probes[i] = key(nsPresent, uint64(i*7)) // present in various generations
		if i%2 == 1 {
			probes[i] = key(nsAbsent, uint64(i))
		}
	}
	dst := make([]uint64, 0, cfg.Generations)
	masks := make([]uint64, 256)
	var i int
	next := func() partition.Hash { i++; return probes[i%len(probes)] }
	gen := f.Current()
	tests := []struct {
		name string
		fn   func()
	}{
		{"Test", func() { f.Test(next()) }},
		{"Candidates", func() { dst = f.Candidates(next(), dst[:0]) }},
		{"Add", func() { f.Add(next()) }},
		{"AddAll", func() { f.AddAll(probes[:64]) }},
		{"MaskAll", func() { f.MaskAll(probes[:256], masks) }},
		{"MaskAllAdd", func() { f.MaskAllAdd(probes[:256], masks) }},
		{"AddTo", func() { f.AddTo(f.Oldest(), next()) }},
		{"Advance by one", func() { gen++; f.Advance(gen) }},
		{"Advance past the window", func() { gen += 10; f.Advance(gen) }},
		{"Advance backwards", func() { f.Advance(gen - 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(1000, tt.fn); n != 0 {
				t.Fatalf("%s: %.1f allocations per call, want 0", tt.name, n)
			}
		})
	}
}
