package filter

import (
	"math"
	"math/bits"
	"runtime"
)

// GenStats describes one live generation.
type GenStats struct {
	Gen uint64
	// Added counts Add and AddTo calls into the generation, repeats included.
	Added uint64
	// SubFilters is the number of sub-filters: 1, plus one each time the
	// generation filled up (it received more keys than KeysPerGeneration).
	SubFilters int
	// Bytes is the size of the generation's bitsets, all sub-filters.
	Bytes int
	// FillRatio is the fraction of bits set, over all sub-filters.
	FillRatio float64
	// EstimatedFPR is the probability that an absent key tests positive in
	// this generation: 1 - prod(1 - rate_j) over its sub-filters j, where
	// rate_j is the mean over the blocks b of sub-filter j of fill_b^k.
	// Growth keeps it below about 1.35 times FalsePositiveRate/Generations until
	// the generation reaches MaxSubFilters.
	EstimatedFPR float64
}

// Stats returns the live generations, newest first. It counts every set bit,
// so it costs a pass over the filter's memory (about 1 ms per 10 MB): call it
// for metrics, not per record.
func (f *Filter) Stats() []GenStats {
	out := make([]GenStats, 0, f.nlive)
	idx := f.head
	for i := range f.nlive {
		s := &f.slots[idx]
		g := GenStats{Gen: f.cur - uint64(i), Added: s.added, SubFilters: len(s.subs)}
		var ones, bits uint64
		miss := 1.0
		for j := range s.subs {
			sb := &s.subs[j]
			n, rate := sb.count()
			ones += n
			bits += sb.m
			g.Bytes += int(sb.m / 8)
			miss *= 1 - rate
		}
		g.FillRatio = float64(ones) / float64(bits)
		g.EstimatedFPR = 1 - miss
		out = append(out, g)
		idx = f.prev(idx)
	}
	runtime.KeepAlive(f) // the bitsets may be unmapped once f is unreachable
	return out
}

// EstimatedFalsePositiveRate estimates, from the bits actually set, the
// probability that Test reports an absent key as present:
// 1 - prod(1 - EstimatedFPR_g) over the live generations. Same cost as Stats.
func (f *Filter) EstimatedFalsePositiveRate() float64 {
	miss := 1.0
	for _, g := range f.Stats() {
		miss *= 1 - g.EstimatedFPR
	}
	return 1 - miss
}

// BytesPerKey is the memory of all generations and their sub-filters divided
// by the keys a full window holds (Generations * KeysPerGeneration).
func (f *Filter) BytesPerKey() float64 {
	var bits uint64
	for i := range f.slots {
		for j := range f.slots[i].subs {
			bits += f.slots[i].subs[j].m
		}
	}
	return float64(bits/8) / (float64(f.cfg.KeysPerGeneration) * float64(f.cfg.Generations))
}

// count returns the bits set in s and the probability that an absent key
// tests positive in it: the mean over the blocks of (bits set/blockBits)^k,
// since a key probes k bits of one block.
func (s *sub) count() (ones uint64, rate float64) {
	var pow [64*maxBlockWords + 1]float64
	B := float64(uint64(1) << s.log)
	for c := range pow {
		pow[c] = math.Pow(float64(c)/B, float64(s.k))
	}
	for off := s.lane; off < s.nblocks*s.stride; off += s.stride {
		n := 0
		for _, w := range s.words[off : off+s.bw] {
			n += bits.OnesCount64(w)
		}
		ones += uint64(n)
		rate += pow[n]
	}
	return ones, rate / float64(s.nblocks)
}

// clear zeroes every block of s.
func (s *sub) clear() {
	if s.stride == s.bw {
		clear(s.words[:s.nblocks*s.bw])
		return
	}
	for off := s.lane; off < s.nblocks*s.stride; off += s.stride {
		clear(s.words[off : off+s.bw])
	}
}
