package filter

import (
	"math"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	valid := Config{KeysPerGeneration: 1000, FalsePositiveRate: 0.01, Generations: 4}
	tests := []struct {
		name string
		cfg  Config
		want []string // one line per problem, in order
	}{
		{"valid", valid, nil},
		{"one generation", Config{KeysPerGeneration: 1, FalsePositiveRate: 0.5, Generations: 1}, nil},
		{"zero value", Config{}, []string{
			"filter.keys_per_generation: must be >= 1, got 0",
			"filter.false_positive_rate: must be in [1e-09, 1), got 0",
			"filter.generations: must be in [1, 64], got 0",
		}},
		{"rate one", Config{KeysPerGeneration: 10, FalsePositiveRate: 1, Generations: 2}, []string{
			"filter.false_positive_rate: must be in [1e-09, 1), got 1",
		}},
		{"rate NaN", Config{KeysPerGeneration: 10, FalsePositiveRate: math.NaN(), Generations: 2}, []string{
			"filter.false_positive_rate: must be in [1e-09, 1), got NaN",
		}},
		{"rate negative", Config{KeysPerGeneration: 10, FalsePositiveRate: -0.1, Generations: 2}, []string{
			"filter.false_positive_rate: must be in [1e-09, 1), got -0.1",
		}},
		{"too many generations", Config{KeysPerGeneration: 10, FalsePositiveRate: 0.1, Generations: 5000}, []string{
			"filter.generations: must be in [1, 64], got 5000",
		}},
		{"negative generations", Config{KeysPerGeneration: 10, FalsePositiveRate: 0.1, Generations: -1}, []string{
			"filter.generations: must be in [1, 64], got -1",
		}},
		{"too big", Config{KeysPerGeneration: 1 << 40, FalsePositiveRate: 0.01, Generations: 4}, []string{
			"filter.keys_per_generation: 1099511627776 keys at false_positive_rate 0.01 over 4 generations need 1634527 MiB per generation, above the 16384 MiB limit",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("Validate() =\n%s\nwant\n%s", err, strings.Join(tt.want, "\n"))
			}
			if _, err := New(tt.cfg, 0); err == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

func TestConfigApplyDefaults(t *testing.T) {
	var c Config
	c.ApplyDefaults()
	want := Config{KeysPerGeneration: DefaultKeysPerGeneration, FalsePositiveRate: DefaultFalsePositiveRate, Generations: DefaultGenerations}
	if c != want {
		t.Fatalf("ApplyDefaults() = %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	set := Config{KeysPerGeneration: 7, FalsePositiveRate: 0.2, Generations: 2}
	got := set
	got.ApplyDefaults()
	if got != set {
		t.Fatalf("ApplyDefaults changed set fields: %+v -> %+v", set, got)
	}
}

// TestConfigSizing pins the sizing rule: each generation's first
// sub-filter is sized for KeysPerGeneration at FalsePositiveRate/Generations
// with the smallest block (128, 256 or 512 bits) that needs at most
// laneSlack times the bits of 512-bit blocks, and grown ones use 512-bit
// blocks.
func TestConfigSizing(t *testing.T) {
	f := mustNew(t, Config{KeysPerGeneration: 2_500_000, FalsePositiveRate: 0.01, Generations: 4}, 3)
	// At 0.25 % per generation a filter of 128-bit blocks needs 15.24 bits
	// per key with k = 7, one of 512-bit blocks 13.17 with k = 8, a
	// classic one 12.47 with k = 9 (TestFalsePositiveRateAtCapacity checks
	// the rate).
	if f.log != 7 || f.m%128 != 0 || f.k != 7 || f.stride != 4*2 {
		t.Fatalf("block 2^%d bits, m %d, k %d, stride %d words: want 128-bit blocks, k = 7, 4 generations in 8 words", f.log, f.m, f.k, f.stride)
	}
	if got := f.BytesPerKey(); got < 1.89 || got > 1.92 {
		t.Fatalf("BytesPerKey() = %.3f, want 15.24 bits/8 = ~1.905", got)
	}
	if rate := blockedRate(float64(2_500_000*128)/float64(f.m), int(f.k), 128); rate > 0.0025 || rate < 0.0024 {
		t.Fatalf("modelled rate at capacity %.5f, want just below 0.0025", rate)
	}
	if sh := f.cfg.shape(1); sh.log != 9 || sh.m%512 != 0 {
		t.Fatalf("grown sub-filter: 2^%d-bit blocks, m %d; want 512-bit blocks", sh.log, sh.m)
	}
	// A tight rate: 128-bit blocks would need 1.4 times the bits, 256-bit
	// ones 1.13 times: two generations per cache line.
	tight := mustNew(t, Config{KeysPerGeneration: 100_000, FalsePositiveRate: 0.001, Generations: 5}, 3)
	if tight.log != 8 || tight.stride != 5*4 {
		t.Fatalf("p = 0.1 %%, 5 generations: block 2^%d bits, stride %d words; want 256-bit blocks, stride 20", tight.log, tight.stride)
	}
}
