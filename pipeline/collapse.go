package pipeline

import (
	"math/bits"
	"slices"
	"unsafe"

	"github.com/dedupstream/dedupstream/partition"
)

// collapseSet holds the keys emitted in the open commit cycle and the
// generation and version each was emitted with. It replaces a Go map on the
// hot path: an open-addressing table over an entry slice in insertion
// order, kept (not reallocated) across cycles, so that a steady stream of
// cycles allocates nothing, a lookup costs one slot read plus, on a
// fingerprint match, one entry read, and Commit walks the entries in order
// instead of iterating a map.
//
// A slot holds the entry's index+1 in its low 32 bits (0: empty) and the top
// 32 bits of the key's slot hash in its high bits, compared before the
// entry is touched. The table is at most half full.
type collapseSet struct {
	slots   []uint64
	entries []cycleEntry
}

// cycleEntry is a key emitted in the open cycle.
type cycleEntry struct {
	h partition.Hash
	pending
}

// collapseRetainSlots bounds the table kept across a reset: a cycle that
// grew it beyond this (a huge backlog batch) releases it.
const collapseRetainSlots = 1 << 20

func collapseHash(h partition.Hash) uint64 { return h.Lo * 0x9E3779B97F4A7C15 }

// get returns the entry of h, or nil.
func (c *collapseSet) get(h partition.Hash) *pending {
	if len(c.entries) == 0 {
		return nil
	}
	mask := uint64(len(c.slots) - 1)
	sh := collapseHash(h)
	fp := sh &^ 0xFFFFFFFF
	for i := sh >> (64 - bits.Len64(mask)); ; i = (i + 1) & mask {
		s := c.slots[i]
		if s == 0 {
			return nil
		}
		if s&^0xFFFFFFFF == fp {
			if e := &c.entries[uint32(s)-1]; e.h == h {
				return &e.pending
			}
		}
	}
}

// set records h with p, replacing an earlier entry of h.
func (c *collapseSet) set(h partition.Hash, p pending) {
	if 2*(len(c.entries)+1) > len(c.slots) {
		c.grow()
	}
	mask := uint64(len(c.slots) - 1)
	sh := collapseHash(h)
	fp := sh &^ 0xFFFFFFFF
	for i := sh >> (64 - bits.Len64(mask)); ; i = (i + 1) & mask {
		s := c.slots[i]
		if s == 0 {
			c.entries = append(c.entries, cycleEntry{h: h, pending: p})
			c.slots[i] = fp | uint64(len(c.entries))
			return
		}
		if s&^0xFFFFFFFF == fp {
			if e := &c.entries[uint32(s)-1]; e.h == h {
				e.pending = p
				return
			}
		}
	}
}

// reserve makes room for n more keys, so that no set of the next n grows
// the table: one rehash instead of one per doubling.
func (c *collapseSet) reserve(n int) {
	need := len(c.entries) + n
	if 2*need <= len(c.slots) {
		return
	}
	c.entries = slices.Grow(c.entries, n)
	c.resize(max(1024, 1<<bits.Len(uint(2*need-1))))
}

// grow doubles the table (at least 1024 slots) and re-inserts the entries.
func (c *collapseSet) grow() { c.resize(max(1024, 2*len(c.slots))) }

// resize makes the table n slots (a power of two, more than twice the
// entries) and re-inserts the entries.
func (c *collapseSet) resize(n int) {
	c.slots = make([]uint64, n)
	// Written before it is read: memory the operating system has just
	// handed out (a new stage, or pages the collector's scavenger gave
	// back) reads as zeros from a shared page until its first write, which
	// then faults a second time and flushes the other cores' TLBs to
	// replace that page; probing a new table read most of its pages first
	// (BenchmarkCollapseFreshTable: 912 -> 646 faults and ~35 % less time
	// per 50000-key cycle into new memory). Clearing writes every page
	// once (make leaves new memory untouched).
	clear(c.slots)
	mask := uint64(n - 1)
	shift := 64 - bits.Len64(mask)
	for j := range c.entries {
		sh := collapseHash(c.entries[j].h)
		i := sh >> shift
		for c.slots[i] != 0 {
			i = (i + 1) & mask
		}
		c.slots[i] = sh&^0xFFFFFFFF | uint64(j+1)
	}
}

// prefetchSlot asks the CPU for the cache line of the slot where a
// lookup or insert of h starts, without waiting for it. The table is
// larger than the caches in a big cycle: batchProbe.prepare prefetches the
// slots of a whole chunk in its hashing loop, so the decisions after it
// find them in the cache instead of waiting for one miss per emit. (Plain
// loads there instead measured slower: each miss held up the hashing.)
func (c *collapseSet) prefetchSlot(h partition.Hash) {
	if len(c.slots) == 0 {
		return
	}
	mask := uint64(len(c.slots) - 1)
	prefetch(uintptr(unsafe.Pointer(&c.slots[collapseHash(h)>>(64-bits.Len64(mask))])))
}

// len returns the number of keys.
func (c *collapseSet) len() int { return len(c.entries) }

// reset empties the set, keeping its memory up to collapseRetainSlots.
func (c *collapseSet) reset() {
	if len(c.entries) == 0 {
		return
	}
	if len(c.slots) > collapseRetainSlots {
		c.slots, c.entries = nil, nil
		return
	}
	clear(c.slots)
	c.entries = c.entries[:0]
}
