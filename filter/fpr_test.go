package filter

import (
	"fmt"
	"math"
	"testing"
)

// TestFalsePositiveRateAtCapacity fills every live generation with
// KeysPerGeneration keys and probes absentProbes keys never added. The
// measured rate must be within 1.5x of the target either way (too high breaks
// the contract, too low means memory is wasted), and the fill-based estimate
// must agree with the measurement.
//
// With 500k probes the expected false positives are 5000 at 1% and 500 at
// 0.1%; the 1.5x band is more than 10 standard deviations wide, so a pass is
// not luck and a sizing or probing bug (a bad range reduction, correlated
// probes, a wrong per-generation budget) fails.
func TestFalsePositiveRateAtCapacity(t *testing.T) {
	const absentProbes = 500_000
	for _, cfg := range []Config{
		{KeysPerGeneration: 100_000, FalsePositiveRate: 0.01, Generations: 4},
		{KeysPerGeneration: 100_000, FalsePositiveRate: 0.001, Generations: 5},
		{KeysPerGeneration: 200_000, FalsePositiveRate: 0.02, Generations: 1},
	} {
		t.Run(fmt.Sprintf("p=%g/G=%d", cfg.FalsePositiveRate, cfg.Generations), func(t *testing.T) {
			f := fillWindow(t, cfg)
			positives := 0
			for i := range uint64(absentProbes) {
				if f.Test(key(nsAbsent, i)) {
					positives++
				}
			}
			measured := float64(positives) / absentProbes
			estimated := f.EstimatedFalsePositiveRate()
			t.Logf("keys/gen %d, G %d: target %.4f%%, measured %.4f%% (%d of %d), estimated %.4f%%, %.2f bits/key, k %d",
				cfg.KeysPerGeneration, cfg.Generations, 100*cfg.FalsePositiveRate, 100*measured, positives, absentProbes,
				100*estimated, 8*f.BytesPerKey(), f.k)
			if measured > 1.5*cfg.FalsePositiveRate || measured < cfg.FalsePositiveRate/1.5 {
				t.Errorf("measured false-positive rate %.5f, want within 1.5x of %.5f", measured, cfg.FalsePositiveRate)
			}
			// Binomial standard deviation of the measurement, 5 sigma.
			sigma := math.Sqrt(estimated * (1 - estimated) / absentProbes)
			if math.Abs(measured-estimated) > 5*sigma {
				t.Errorf("estimated rate %.5f, measured %.5f: more than 5 sigma (%.5f) apart", estimated, measured, sigma)
			}
			// Every added key is found: a Bloom filter has no false negatives.
			for i := range uint64(cfg.KeysPerGeneration) * uint64(cfg.Generations) {
				if !f.Test(key(nsPresent, i)) {
					t.Fatalf("false negative for key %d", i)
				}
			}
		})
	}
}
