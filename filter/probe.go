package filter

import (
	"math/bits"

	"github.com/dedupstream/dedupstream/partition"
)

// probes yields the k bit positions of a key from its 128-bit hash by
// enhanced double hashing (Dillinger and Manolios): x starts at Hi and steps
// by y, which starts at Lo and grows by i at step i. Each x is mapped into
// [0, m) by the high word of x*m (Lemire's multiply-shift reduction) instead
// of a division. All generations share m and k, so the positions are computed
// once per key whatever the number of generations.
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

// insert sets the k positions of h in words.
func insert(words []uint64, m, k uint64, h partition.Hash) {
	p := newProbes(h)
	for range k {
		pos := p.next(m)
		words[pos>>6] |= 1 << (pos & 63)
	}
}

// match returns the live generations that may hold h as a mask: bit i stands
// for generation Current()-i. With first set it stops at the newest one.
//
// An absent key is rejected by every generation, typically after one or two
// probes each, and on a large window every probe is a cache miss. So the
// first two probes of every generation are loaded without branching, which
// lets the CPU overlap those misses; only generations that pass both (about
// a quarter at design capacity) are probed further.
func (f *Filter) match(h partition.Hash, first bool) uint64 {
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
	if f.k <= 2 {
		return mask
	}
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
		if first && j == f.k {
			return 1 << i
		}
	}
	return mask
}
