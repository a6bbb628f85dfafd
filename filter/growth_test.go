package filter

import (
	"bytes"
	"fmt"
	"math"
	"testing"
)

// TestBacklogInOneGeneration adds ten times the keys of a whole window to
// one generation, as a backlog whose timestamps all fall into one generation
// does, and probes absentProbes keys never added. The generation grows
// sub-filters, so the measured false-positive rate of the front stays within
// 1.5x of the target, and so does the generation's own rate against its
// budget FalsePositiveRate/Generations. Without growth the generation is
// nearly all ones and almost every probe is a false positive.
//
// 500k probes expect 1250 generation false positives at 1%/4 (sigma 35), so
// the 1.5x band is more than 15 sigma wide.
func TestBacklogInOneGeneration(t *testing.T) {
	const absentProbes = 500_000
	for _, cfg := range []Config{
		{KeysPerGeneration: 10_000, FalsePositiveRate: 0.01, Generations: 4},
		{KeysPerGeneration: 50_000, FalsePositiveRate: 0.001, Generations: 1},
	} {
		t.Run(fmt.Sprintf("p=%g/G=%d", cfg.FalsePositiveRate, cfg.Generations), func(t *testing.T) {
			f := mustNew(t, cfg, 10)
			backlog := 10 * uint64(cfg.KeysPerGeneration) * uint64(cfg.Generations)
			burst := f.Current() - uint64(cfg.Generations-1)/2 // a middle generation
			for i := range backlog {
				f.AddTo(burst, key(nsPresent, i))
			}
			var front, gen int
			var dst []uint64
			for i := range uint64(absentProbes) {
				dst = f.Candidates(key(nsAbsent, i), dst[:0])
				if len(dst) > 0 {
					front++
				}
				for _, g := range dst {
					if g == burst {
						gen++
					}
				}
			}
			frontRate := float64(front) / absentProbes
			genRate := float64(gen) / absentProbes
			budget := cfg.FalsePositiveRate / float64(cfg.Generations)
			var st GenStats
			for _, s := range f.Stats() {
				if s.Gen == burst {
					st = s
				}
			}
			t.Logf("%d keys into generation %d (%dx its design): %d sub-filters, %.2f bits/key; front %.4f%% (target %.4f%%), generation %.4f%% (budget %.4f%%, estimated %.4f%%)",
				backlog, burst, backlog/uint64(cfg.KeysPerGeneration), st.SubFilters, float64(8*st.Bytes)/float64(backlog),
				100*frontRate, 100*cfg.FalsePositiveRate, 100*genRate, 100*budget, 100*st.EstimatedFPR)
			if frontRate > 1.5*cfg.FalsePositiveRate {
				t.Errorf("front false-positive rate %.5f, want at most 1.5x the target %.5f", frontRate, cfg.FalsePositiveRate)
			}
			if genRate > 1.5*budget {
				t.Errorf("generation false-positive rate %.5f, want at most 1.5x its budget %.5f", genRate, budget)
			}
			sigma := math.Sqrt(st.EstimatedFPR * (1 - st.EstimatedFPR) / absentProbes)
			if math.Abs(genRate-st.EstimatedFPR) > 5*sigma {
				t.Errorf("generation: estimated rate %.5f, measured %.5f: more than 5 sigma (%.5f) apart", st.EstimatedFPR, genRate, sigma)
			}
			for i := range backlog {
				if !f.Test(key(nsPresent, i)) {
					t.Fatalf("false negative for backlog key %d", i)
				}
			}
		})
	}
}

// TestGrowthAtCapacity: a generation that receives exactly KeysPerGeneration
// keys keeps one sub-filter (the full threshold has a margin); one that
// receives twice as many grows, and rotation releases what it grew.
func TestGrowthAtCapacity(t *testing.T) {
	cfg := Config{KeysPerGeneration: 100_000, FalsePositiveRate: 0.01, Generations: 4}
	f := fillWindow(t, cfg)
	for _, s := range f.Stats() {
		if s.SubFilters != 1 {
			t.Fatalf("generation %d at capacity has %d sub-filters, want 1", s.Gen, s.SubFilters)
		}
	}
	for i := range uint64(cfg.KeysPerGeneration) {
		f.Add(key(nsOther, i))
	}
	if s := f.Stats()[0]; s.SubFilters != 2 {
		t.Fatalf("generation at twice its capacity has %d sub-filters, want 2", s.SubFilters)
	}
	before := f.BytesPerKey()
	f.Advance(f.Current() + uint64(cfg.Generations))
	if f.grown != 0 || f.BytesPerKey() >= before {
		t.Fatalf("after the grown generation left the window: grown mask %b, %.2f bytes/key (was %.2f)", f.grown, f.BytesPerKey(), before)
	}
}

// TestGrowthSnapshotRoundTrip: a snapshot carries every sub-filter of a
// grown generation, and the restored filter keeps growing where it stopped.
func TestGrowthSnapshotRoundTrip(t *testing.T) {
	cfg := Config{KeysPerGeneration: 1000, FalsePositiveRate: 0.01, Generations: 3}
	f := mustNew(t, cfg, 5)
	for i := range uint64(9000) {
		f.AddTo(4, key(nsPresent, i))
	}
	var buf bytes.Buffer
	if _, err := f.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	g, err := ReadFrom(&buf, cfg)
	if err != nil {
		t.Fatal(err)
	}
	requireSameAnswers(t, f, g)
	if n := g.Stats()[1].SubFilters; n < 3 {
		t.Fatalf("restored generation 4 has %d sub-filters, want the grown ones", n)
	}
	for i := range uint64(9000) {
		if !g.Test(key(nsPresent, i)) {
			t.Fatalf("false negative for key %d after the round trip", i)
		}
	}
	for i := range uint64(20_000) {
		f.AddTo(4, key(nsOther, i))
		g.AddTo(4, key(nsOther, i))
	}
	requireSameAnswers(t, f, g)
}
