package filter

import "math"

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
	// this generation: 1 - prod(1 - fill_j^k_j) over its sub-filters j.
	// Growth keeps it below 1.5 times FalsePositiveRate/Generations until
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
			n := uint64(sb.bf.BitSet().Count())
			ones += n
			bits += sb.m
			g.Bytes += len(sb.words) * 8
			miss *= 1 - math.Pow(float64(n)/float64(sb.m), float64(sb.k))
		}
		g.FillRatio = float64(ones) / float64(bits)
		g.EstimatedFPR = 1 - miss
		out = append(out, g)
		idx = f.prev(idx)
	}
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
	words := 0
	for i := range f.slots {
		for j := range f.slots[i].subs {
			words += len(f.slots[i].subs[j].words)
		}
	}
	return float64(words*8) / (float64(f.cfg.KeysPerGeneration) * float64(f.cfg.Generations))
}
