package filter

import (
	"math"
	"sync"
)

// Every sub-filter is a blocked Bloom filter: a key's k bits all fall into
// one block of blockBits bits, one 64-byte cache line, chosen by the high
// word of its hash. A probe or an insert thus touches one cache line per
// sub-filter instead of k. Blocks fill unevenly, so for the same rate a
// blocked filter needs a few more bits per key than a classic one; the
// sizing below accounts for that exactly instead of using the classic
// formula.
const (
	blockBits  = 512
	blockWords = blockBits / 64
)

// blockedRate is the false-positive rate of a blocked filter whose blocks
// hold lambda keys on average, with k probes: the number of keys in a block
// is Poisson(lambda), and a block holding j keys has each bit set with
// probability 1-(1-1/B)^(kj).
func blockedRate(lambda float64, k int) float64 {
	if lambda*float64(k) > 40*blockBits {
		return 1 // every bit set but with probability below e^-40
	}
	qk := math.Pow(1-1.0/blockBits, float64(k)) // a bit survives one key
	spread := 12*math.Sqrt(lambda) + 30
	sum := 0.0
	for j := max(0, math.Floor(lambda-spread)); j <= lambda+spread; j++ {
		lg, _ := math.Lgamma(j + 1)
		pj := math.Exp(j*math.Log(lambda) - lambda - lg) // P(j keys in the block)
		if lambda == 0 {
			pj = 1
		}
		sum += pj * math.Pow(1-math.Pow(qk, j), float64(k))
		if lambda == 0 {
			break
		}
	}
	return sum
}

// blockedFill is the expected fraction of bits set when blocks hold lambda
// keys on average: 1 - E[(1-1/B)^(kJ)] for J ~ Poisson(lambda).
func blockedFill(lambda float64, k int) float64 {
	return 1 - math.Exp(-lambda*(1-math.Pow(1-1.0/blockBits, float64(k))))
}

// blockedParams returns the fewest bits per key, and the probes k, at which
// a blocked filter stays at or below rate.
func blockedParams(rate float64) (bitsPerKey float64, k int) {
	best := func(b float64) (float64, int) {
		center := int(math.Round(b * math.Ln2))
		fp, bk := math.Inf(1), 1
		for k := max(1, center-4); k <= center+3; k++ {
			if r := blockedRate(blockBits/b, k); r < fp {
				fp, bk = r, k
			}
		}
		return fp, bk
	}
	lo := -math.Log(rate) / (math.Ln2 * math.Ln2) // a classic filter's size
	hi := lo
	fp, k := best(hi)
	for fp > rate {
		lo, hi = hi, hi*1.25
		fp, k = best(hi)
	}
	if hi == lo {
		return hi, k
	}
	for range 40 {
		mid := (lo + hi) / 2
		if fp, mk := best(mid); fp > rate {
			lo = mid
		} else {
			hi, k = mid, mk
		}
	}
	return hi, k
}

// shapes caches Config.shape, which takes a few milliseconds of numerical
// search: by Config and sub-filter index. A process uses few Configs.
var shapes sync.Map

type shapeKey struct {
	c Config
	i int
}

// shape returns the size of sub-filter i of every generation. c must be
// valid and i < c.maxSubs().
func (c Config) shape(i int) shape {
	if sh, ok := shapes.Load(shapeKey{c, i}); ok {
		return sh.(shape)
	}
	sh := c.computeShape(i)
	shapes.Store(shapeKey{c, i}, sh)
	return sh
}

func (c Config) computeShape(i int) shape {
	rate := c.subRate(i)
	keys := c.subKeys(i)
	bpk, k := blockedParams(rate)
	nblocks := max(1, math.Ceil(keys*bpk/blockBits))
	sh := shape{m: uint64(nblocks) * blockBits, k: uint64(k)}
	// The sub-filter is full when the keys it holds bring its rate to
	// fullFactor * rate; full is the bits they are expected to set.
	target := fullFactor * rate
	rateAt := func(x float64) float64 { return blockedRate(x/nblocks, k) }
	lo, hi := 0.0, keys
	for rateAt(hi) < target {
		if target >= 1 || hi > keys*(1<<40) {
			sh.full = sh.m
			return sh
		}
		lo, hi = hi, hi*2
	}
	for range 50 {
		if mid := (lo + hi) / 2; rateAt(mid) < target {
			lo = mid
		} else {
			hi = mid
		}
	}
	full := math.Ceil(float64(sh.m) * blockedFill(hi/nblocks, k))
	sh.full = uint64(max(1, min(full, float64(sh.m))))
	return sh
}
