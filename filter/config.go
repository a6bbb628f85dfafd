package filter

import (
	"errors"
	"fmt"
	"math"
)

// Defaults applied by [Config.ApplyDefaults] to zero fields.
const (
	DefaultKeysPerGeneration uint    = 1_000_000
	DefaultFalsePositiveRate float64 = 0.01
	DefaultGenerations       int     = 4
)

// Limits enforced by [Config.Validate].
const (
	// MinFalsePositiveRate is the smallest accepted target. Below it a
	// generation costs more than ~45 bits per key for no practical gain: every
	// "maybe" is confirmed in the exact store anyway.
	MinFalsePositiveRate = 1e-9
	// MaxGenerations bounds the ring: Test probes every live generation, and
	// the live generations fit a 64-bit mask.
	MaxGenerations = 64
	// MaxBytesPerGeneration bounds one generation's bitset (16 GiB).
	MaxBytesPerGeneration = 16 << 30
)

// Config sizes a [Filter]. A snapshot can only be restored into a filter with
// an identical Config (see [ReadFrom]).
type Config struct {
	// KeysPerGeneration is the design capacity of one generation: the number
	// of distinct keys added while it is the newest (plus any added later
	// with AddTo). Beyond it the generation grows another sub-filter, twice
	// as large, so its false-positive rate stays near its budget and its
	// memory grows with its keys (see the package documentation).
	// The default value is 1,000,000.
	KeysPerGeneration uint
	// FalsePositiveRate is the target probability that Test reports an
	// absent key as present when every live generation holds
	// KeysPerGeneration keys. Each generation is sized for
	// FalsePositiveRate/Generations, so by the union bound a Test across all
	// live generations stays at or below the target.
	// The default value is 0.01.
	FalsePositiveRate float64
	// Generations is the number of live generations: the newest one and
	// Generations-1 older ones. With a dedup window W split into generations
	// of span W/G, a key is remembered for between W-W/G and W.
	// The default value is 4.
	Generations int
}

// ApplyDefaults sets every zero field to its default.
func (c *Config) ApplyDefaults() {
	if c.KeysPerGeneration == 0 {
		c.KeysPerGeneration = DefaultKeysPerGeneration
	}
	if c.FalsePositiveRate == 0 {
		c.FalsePositiveRate = DefaultFalsePositiveRate
	}
	if c.Generations == 0 {
		c.Generations = DefaultGenerations
	}
}

// Validate reports every problem with c, one per line, each naming its field.
func (c Config) Validate() error {
	var errs []error
	if c.KeysPerGeneration < 1 {
		errs = append(errs, fmt.Errorf("filter.keys_per_generation: must be >= 1, got %d", c.KeysPerGeneration))
	}
	fprOK := c.FalsePositiveRate >= MinFalsePositiveRate && c.FalsePositiveRate < 1 // false for NaN
	if !fprOK {
		errs = append(errs, fmt.Errorf("filter.false_positive_rate: must be in [%g, 1), got %g", MinFalsePositiveRate, c.FalsePositiveRate))
	}
	gensOK := c.Generations >= 1 && c.Generations <= MaxGenerations
	if !gensOK {
		errs = append(errs, fmt.Errorf("filter.generations: must be in [1, %d], got %d", MaxGenerations, c.Generations))
	}
	if c.KeysPerGeneration >= 1 && fprOK && gensOK {
		if bits := c.bitsFloat(); bits > MaxBytesPerGeneration*8 {
			errs = append(errs, fmt.Errorf("filter.keys_per_generation: %d keys at false_positive_rate %g over %d generations need %.0f MiB per generation, above the %d MiB limit",
				c.KeysPerGeneration, c.FalsePositiveRate, c.Generations, bits/8/(1<<20), MaxBytesPerGeneration>>20))
		}
	}
	return errors.Join(errs...)
}

// perGenerationRate is the false-positive budget of one generation.
func (c Config) perGenerationRate() float64 {
	return c.FalsePositiveRate / float64(c.Generations)
}

// bitsFloat is the generation size in bits before rounding, used to reject
// configurations whose size would overflow before calling into bloom.
func (c Config) bitsFloat() float64 {
	return c.subBits(0)
}

// Growth of a generation (see the package documentation).
const (
	// MaxSubFilters bounds the sub-filters of one generation: together they
	// hold 2^MaxSubFilters-1 times KeysPerGeneration keys at the target
	// rate. A generation at the limit keeps filling its last sub-filter.
	MaxSubFilters = 16
	// fullFactor: a sub-filter is full, and the next one is added, when its
	// estimated rate (fill^k) reaches fullFactor times the rate it was
	// sized for. The margin keeps a generation that receives exactly
	// KeysPerGeneration keys from growing for the last few of them.
	fullFactor = 1.1
)

// subRate is the false-positive rate sub-filter i of a generation is sized
// for: the generation's budget p for the first, p/2^(i+3) for the ones it
// grows. Each is full at fullFactor times its rate (measured: up to 1.2
// times, the blocks' fill varies), so a generation however grown stays
// below about 1.2 * p * (1 + 1/16 + 1/32 + ...) = 1.35 p.
func (c Config) subRate(i int) float64 {
	p := c.perGenerationRate()
	if i > 0 {
		p = math.Ldexp(p, -(i + 3))
	}
	return p
}

// subKeys is the design capacity of sub-filter i: KeysPerGeneration * 2^i,
// so that a generation holding n keys has about log2(n/KeysPerGeneration)
// sub-filters.
func (c Config) subKeys(i int) float64 {
	return math.Ldexp(float64(c.KeysPerGeneration), i)
}

// subBits approximates the size of sub-filter i in bits, by the classic
// Bloom formula: the blocked layout takes 4 to 16 % more (see shape). It
// bounds growth and rejects configurations whose size would overflow.
func (c Config) subBits(i int) float64 {
	return -c.subKeys(i) * math.Log(c.subRate(i)) / (math.Ln2 * math.Ln2)
}

// maxSubs is the number of sub-filters a generation may have: at most
// MaxSubFilters, and none larger than MaxBytesPerGeneration. c must be
// valid.
func (c Config) maxSubs() int {
	n := 1
	for n < MaxSubFilters && c.subBits(n) <= MaxBytesPerGeneration*8 {
		n++
	}
	return n
}

// shape is the size of one sub-filter.
type shape struct {
	m, k uint64 // bits (a multiple of the block's) and probes
	log  uint64 // log2 of the block's bits
	full uint64 // bits set at which it is full: its rate is fullFactor * rate
}
