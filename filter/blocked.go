package filter

import (
	"math"
	"sync"
)

// Every sub-filter is a blocked Bloom filter: a key's k bits all fall into
// one block, chosen by the high word of its hash, so a probe or an insert
// touches one cache line per sub-filter at most instead of k. A grown
// sub-filter's blocks are 512 bits, a whole 64-byte line. The first
// sub-filters of all generations lie interleaved in the Filter's rows
// (a key's blocks in every generation side by side), and their blocks are
// the smallest of 128, 256 and 512 bits that needs at most laneSlack times
// the bits per key of 512-bit blocks: at the default 1 % over 4
// generations, 128 bits, so one line holds a key's blocks in all four.
// Blocks fill unevenly, so for the same rate a blocked filter needs more
// bits per key than a classic one, the more the smaller its blocks; the
// sizing below accounts for that exactly instead of using the classic
// formula.
const (
	minBlockLog   = 7 // 128-bit blocks
	maxBlockLog   = 9 // 512-bit blocks: a cache line
	maxBlockWords = 1 << (maxBlockLog - 6)
	lineWords     = 8 // words in a cache line
	laneSlack     = 1.2
)

// blockedRate is the false-positive rate of a blocked filter whose blocks
// of B bits hold lambda keys on average, with k probes: the number of keys
// in a block is Poisson(lambda), and a block holding j keys has each bit
// set with probability 1-(1-1/B)^(kj).
func blockedRate(lambda float64, k int, B float64) float64 {
	if lambda*float64(k) > 40*B {
		return 1 // every bit set but with probability below e^-40
	}
	qk := math.Pow(1-1.0/B, float64(k)) // a bit survives one key
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

// blockedFill is the expected fraction of bits set when blocks of B bits
// hold lambda keys on average: 1 - E[(1-1/B)^(kJ)] for J ~ Poisson(lambda).
func blockedFill(lambda float64, k int, B float64) float64 {
	return 1 - math.Exp(-lambda*(1-math.Pow(1-1.0/B, float64(k))))
}

// blockedParams returns the fewest bits per key, and the probes k, at which
// a blocked filter of B-bit blocks stays at or below rate. Small blocks
// saturate: their best k lies well below a classic filter's b*ln2, so
// every k up to that is tried.
func blockedParams(rate, B float64) (bitsPerKey float64, k int) {
	best := func(b float64) (float64, int) {
		fp, bk := math.Inf(1), 1
		for k := 1; k <= int(math.Round(b*math.Ln2))+3; k++ {
			if r := blockedRate(B/b, k, B); r < fp {
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
	log := uint64(maxBlockLog)
	bpk, k := blockedParams(rate, 1<<maxBlockLog)
	if i == 0 {
		for l := uint64(minBlockLog); l < maxBlockLog; l++ {
			if b, lk := blockedParams(rate, float64(uint64(1)<<l)); b <= laneSlack*bpk {
				log, bpk, k = l, b, lk
				break
			}
		}
	}
	B := float64(uint64(1) << log)
	nblocks := max(1, math.Ceil(keys*bpk/B))
	sh := shape{m: uint64(nblocks * B), k: uint64(k), log: log}
	// The sub-filter is full when the keys it holds bring its rate to
	// fullFactor * rate; full is the bits they are expected to set.
	target := fullFactor * rate
	rateAt := func(x float64) float64 { return blockedRate(x/nblocks, k, B) }
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
	full := math.Ceil(float64(sh.m) * blockedFill(hi/nblocks, k, B))
	sh.full = uint64(max(1, min(full, float64(sh.m))))
	return sh
}
