package filter

import (
	"math/bits"
	"runtime"
	"unsafe"

	"github.com/dedupstream/dedupstream/partition"
)

// probeMul is odd, so z -> z*probeMul is a bijection of uint64; the top
// bits of successive products are a key's positions inside its block.
const probeMul = 0x9E3779B97F4A7C15

// pattern is the set of bits a key sets in its block, as the block's words.
// The high word of the 128-bit hash (xxh3-128, computed once per record)
// picks the block, by Lemire's multiply-shift reduction instead of a
// division; the low word gives the k positions inside it, log bits each
// (the block has 2^log bits) from successive products by probeMul. All
// first sub-filters share their shape, so a key's block and pattern are
// computed once whatever the number of generations; a grown sub-filter has
// its own.
type pattern [maxBlockWords]uint64

func makePattern(h partition.Hash, k, log uint64) pattern {
	var p pattern
	z := h.Lo
	for range k {
		pos := z >> (64 - log)
		p[pos>>6] |= 1 << (pos & 63)
		z *= probeMul
	}
	return p
}

// blockIndex returns h's block among nblocks.
func blockIndex(h partition.Hash, nblocks uint64) uint64 {
	b, _ := bits.Mul64(h.Hi, nblocks)
	return b
}

// blockAt returns the offset in s.words of the first word of h's block.
func (s *sub) blockAt(h partition.Hash) uint64 {
	return blockIndex(h, s.nblocks)*s.stride + s.lane
}

// rowAt returns the offset in f.rows of h's row: its blocks in the first
// sub-filters of every slot.
func (f *Filter) rowAt(h partition.Hash) uint64 {
	return blockIndex(h, f.nblocks) * f.stride
}

// covers reports whether every bit of p is set in blk (the block's words).
func covers(blk []uint64, p *pattern) bool {
	var miss uint64
	for w, x := range blk {
		miss |= p[w] &^ x
	}
	return miss == 0
}

// insert sets the bits of h in s and returns how many were not set before.
func (s *sub) insert(h partition.Hash) uint64 {
	p := makePattern(h, s.k, s.log)
	return s.insertPattern(&p, s.blockAt(h))
}

// insertPattern sets the bits of p in the block at word off of s and
// returns how many were not set before.
func (s *sub) insertPattern(p *pattern, off uint64) uint64 {
	blk := s.words[off : off+s.bw]
	var set int
	for w := range blk {
		set += bits.OnesCount64(p[w] &^ blk[w])
		blk[w] |= p[w]
	}
	return uint64(set)
}

// contains reports whether all bits of h are set in s.
func (s *sub) contains(h partition.Hash) bool {
	p := makePattern(h, s.k, s.log)
	off := s.blockAt(h)
	return covers(s.words[off:off+s.bw], &p)
}

// match returns the live generations that may hold h as a mask: bit i stands
// for generation Current()-i. With any set it stops at the first generation
// found.
//
// An absent key is rejected by every generation, and on a large window
// every block read is a cache miss. The first sub-filters of all
// generations share their shape and lie interleaved in f.rows, so the
// key's blocks in all of them form one row: the loop reads one cache line
// (4 generations) without a data-dependent branch. Grown
// sub-filters, present only in generations that received more keys than
// they were sized for, are probed after that, in the generations not
// already matched.
func (f *Filter) match(h partition.Hash, any bool) uint64 {
	p := makePattern(h, f.k, f.log)
	return f.matchAt(h, &p, f.rowAt(h), any)
}

// matchAt is match given h's pattern p and row in the first sub-filters.
func (f *Filter) matchAt(h partition.Hash, p *pattern, row uint64, any bool) uint64 {
	var mask uint64
	for i, lane := range f.live {
		if covers(f.rows[row+lane:row+lane+f.bw], p) {
			mask |= f.liveBit[i]
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

// maskAhead is how many keys MaskAll prefetches ahead of the one it tests
// (BenchmarkFront100M: 8 and 16 within noise of each other, 4 keys of
// loads no better than 16).
const maskAhead = 16

// MaskAll sets masks[i] to Mask(hs[i]) for every i (len(masks) >=
// len(hs)). It first prefetches the blocks of the first maskAhead keys,
// then, before testing key i, those of key i+maskAhead, in every live
// generation. A prefetch retires at once, so the misses of many
// keys are in flight while the CPU tests the earlier ones, whose blocks
// then mostly hit the cache. Plain loads ahead, as before, also overlap
// misses, but a load that misses holds up the reorder buffer, about two
// keys' work: on a 100M-key window (BenchmarkFront100M, huge pages) MaskAll
// took 532 ns of CPU per key with loads 8 keys ahead, 261 with prefetches
// 16 ahead.
func (f *Filter) MaskAll(hs []partition.Hash, masks []uint64) {
	masks = masks[:len(hs)]
	for j := range min(maskAhead, len(hs)) {
		f.prefetchBlocks(hs[j])
	}
	for i := range hs {
		if j := i + maskAhead; j < len(hs) {
			f.prefetchBlocks(hs[j])
		}
		masks[i] = f.match(hs[i], false)
	}
	runtime.KeepAlive(f) // the bitsets may be unmapped once f is unreachable
}

// prefetchBlocks prefetches h's row in the first sub-filters: one cache
// line with up to 4 generations (rows are line-aligned then), one more per
// 4 generations beyond.
func (f *Filter) prefetchBlocks(h partition.Hash) {
	row := f.rowAt(h)
	prefetch(uintptr(unsafe.Pointer(&f.rows[row])))
	for o := lineWords - row%lineWords; o < f.stride; o += lineWords {
		prefetch(uintptr(unsafe.Pointer(&f.rows[row+o])))
	}
}

// MaskAllAdd is MaskAll fused with Add: it sets masks[i] to Mask(hs[i]) as
// MaskAll does, and right after probing a key whose mask is 0 (no live
// generation may hold it: it is new) and whose hash is not zero, it
// records the key in the newest generation exactly as Add would (same
// bits, counts and growth). Keys are probed and added in order, so a key
// repeated later in hs gets a mask naming the newest generation.
//
// The caller still calls Add for a key it emits whose mask was not 0 or
// whose hash is zero (a zero hash is never added here: the stage probes a
// zero hash for records it dead-letters), and for every key if the
// newest generation changed since MaskAllAdd. Adding a key that is then
// not emitted costs only a false positive later, never a drop.
//
// The stage emits almost every key whose mask is 0, and Add of such a key
// after the chunk was probed found its block evicted again: at 100M keys
// the insert was a cache miss (sub.insert, 15 s of a 207 s sweep). Here
// the newest generation's block was just read, and the pattern and offset
// are computed once for both.
func (f *Filter) MaskAllAdd(hs []partition.Hash, masks []uint64) {
	masks = masks[:len(hs)]
	for j := range min(maskAhead, len(hs)) {
		f.prefetchBlocks(hs[j])
	}
	for i, h := range hs {
		if j := i + maskAhead; j < len(hs) {
			f.prefetchBlocks(hs[j])
		}
		p := makePattern(h, f.k, f.log)
		row := f.rowAt(h)
		m := f.matchAt(h, &p, row, false)
		masks[i] = m
		if m == 0 && h != (partition.Hash{}) {
			f.insertProbed(h, &p, row)
		}
	}
	runtime.KeepAlive(f) // the bitsets may be unmapped once f is unreachable
}

// insertProbed is insert into the newest generation given h's pattern p and
// row in the first sub-filters, which it reuses while the generation has
// only its first sub-filter.
func (f *Filter) insertProbed(h partition.Hash, p *pattern, row uint64) {
	s := &f.slots[f.head]
	if len(s.subs) != 1 {
		f.insert(f.head, h)
		return
	}
	first := &s.subs[0]
	empty := first.ones == 0
	first.ones += first.insertPattern(p, row+first.lane)
	s.added++
	if empty {
		f.relink() // the generation's first key: probe it from now on
	}
	if first.ones >= first.full {
		f.grow(f.head)
	}
}
