package filter

import "math"

// GenStats describes one live generation.
type GenStats struct {
	Gen uint64
	// Added counts Add and AddTo calls into the generation, repeats included.
	Added uint64
	// Bytes is the size of the generation's bitset.
	Bytes int
	// FillRatio is the fraction of bits set.
	FillRatio float64
	// EstimatedFPR is FillRatio^k: the probability that an absent key tests
	// positive in this generation.
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
		fill := float64(s.bf.BitSet().Count()) / float64(f.m)
		out = append(out, GenStats{
			Gen:          f.cur - uint64(i),
			Added:        s.added,
			Bytes:        len(s.words) * 8,
			FillRatio:    fill,
			EstimatedFPR: math.Pow(fill, float64(f.k)),
		})
		idx = f.prev(idx)
	}
	return out
}

// EstimatedFalsePositiveRate estimates, from the bits actually set, the
// probability that Test reports an absent key as present:
// 1 - prod(1 - fill_g^k) over the live generations. Same cost as Stats.
func (f *Filter) EstimatedFalsePositiveRate() float64 {
	miss := 1.0
	for _, g := range f.Stats() {
		miss *= 1 - g.EstimatedFPR
	}
	return 1 - miss
}

// BytesPerKey is the memory of all generations divided by the keys a full
// window holds (Generations * KeysPerGeneration).
func (f *Filter) BytesPerKey() float64 {
	words := 0
	for i := range f.slots {
		words += len(f.slots[i].words)
	}
	return float64(words*8) / (float64(f.cfg.KeysPerGeneration) * float64(f.cfg.Generations))
}
