package filter

import (
	"math/bits"

	"github.com/dedupstream/dedupstream/partition"
)

// probes yields the k bit positions of a key from its 128-bit hash by
// enhanced double hashing (Dillinger and Manolios): x starts at Hi and steps
// by y, which starts at Lo and grows by i at step i. Each x is mapped into
// [0, m) by the high word of x*m (Lemire's multiply-shift reduction) instead
// of a division. All first sub-filters share m and k, so their positions are
// computed once per key whatever the number of generations; a grown
// sub-filter maps the same sequence into its own m.
type probes struct {
	x, y, i uint64
}

func newProbes(h partition.Hash) probes { return probes{x: h.Hi, y: h.Lo} }

// next returns the next position in [0, m).
func (p *probes) next(m uint64) uint64 {
	pos, _ := bits.Mul64(p.x, m)
	p.x += p.y
	p.y += p.i
	p.i++
	return pos
}

// bit returns bit pos of words as 0 or 1.
func bit(words []uint64, pos uint64) uint64 {
	return (words[pos>>6] >> (pos & 63)) & 1
}

// insert sets the k positions of h in words and returns how many of them
// were not set before.
func insert(words []uint64, m, k uint64, h partition.Hash) uint64 {
	p := newProbes(h)
	var set uint64
	for range k {
		pos := p.next(m)
		w := words[pos>>6]
		set += ((w >> (pos & 63)) & 1) ^ 1
		words[pos>>6] = w | 1<<(pos&63)
	}
	return set
}

// contains reports whether all k positions of h are set in sub-filter s.
func (s *sub) contains(h partition.Hash) bool {
	p := newProbes(h)
	for range s.k {
		if bit(s.words, p.next(s.m)) == 0 {
			return false
		}
	}
	return true
}

// match returns the live generations that may hold h as a mask: bit i stands
// for generation Current()-i. With any set it stops at the first generation
// found.
//
// An absent key is rejected by every generation, typically after one or two
// probes each, and on a large window every probe is a cache miss. So the
// first two probes of every first sub-filter are loaded without branching,
// which lets the CPU overlap those misses; only generations that pass both
// (about a quarter at design capacity) are probed further. Grown
// sub-filters, present only in generations that received more keys than
// they were sized for, are probed after that, in the generations not
// already matched.
func (f *Filter) match(h partition.Hash, any bool) uint64 {
	p := newProbes(h)
	p0 := p.next(f.m)
	p1 := p0
	if f.k > 1 {
		p1 = p.next(f.m)
	}
	var mask uint64
	idx := f.head
	for i := range f.nlive {
		words := f.slots[idx].words
		mask |= (bit(words, p0) & bit(words, p1)) << i
		idx = f.prev(idx)
	}
	if f.k > 2 {
		for rest := mask; rest != 0; rest &= rest - 1 {
			i := bits.TrailingZeros64(rest)
			words := f.slots[f.slotOf(i)].words
			q := p
			j := uint64(2)
			for ; j < f.k; j++ {
				if bit(words, q.next(f.m)) == 0 {
					mask &^= 1 << i
					break
				}
			}
			if any && j == f.k {
				return 1 << i
			}
		}
	}
	if f.grown == 0 || (any && mask != 0) {
		return mask
	}
	return f.matchGrown(h, mask, any)
}

// matchGrown adds to mask the live generations not in it whose grown
// sub-filters may hold h.
func (f *Filter) matchGrown(h partition.Hash, mask uint64, any bool) uint64 {
	idx := f.head
	for i := range f.nlive {
		if f.grown&(1<<idx) != 0 && mask&(1<<i) == 0 {
			subs := f.slots[idx].subs[1:]
			for j := range subs {
				if subs[j].contains(h) {
					mask |= 1 << i
					if any {
						return mask
					}
					break
				}
			}
		}
		idx = f.prev(idx)
	}
	return mask
}
