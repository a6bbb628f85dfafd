package filter

import (
	"fmt"
	"math/bits"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/dedupstream/dedupstream/partition"
)

// Filter is a generational Bloom filter over 128-bit key hashes. It keeps
// Config.Generations live generations: the newest, Current(), and the older
// ones down to Current()-Generations+1 (none below generation 0).
//
// A Filter is not safe for concurrent use: it belongs to one stage.
type Filter struct {
	cfg  Config
	m, k uint64 // bits and probes of every generation

	cur   uint64 // newest generation
	nlive int    // live generations: min(Generations, cur+1)
	head  int    // slots[head] holds cur, slots[head-i mod G] holds cur-i
	slots []slot
	tag   uint64
}

// slot is one generation's sub-filter. The bloom filter owns the storage;
// words aliases its bitset so probes skip the method calls.
type slot struct {
	bf    *bloom.BloomFilter
	words []uint64
	added uint64 // Add/AddTo calls since the slot took this generation
}

// New returns an empty filter whose newest generation is gen.
func New(cfg Config, gen uint64) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newFilter(cfg, gen), nil
}

// newFilter allocates the generations of a valid cfg.
func newFilter(cfg Config, gen uint64) *Filter {
	m, k := cfg.params()
	f := &Filter{
		cfg:   cfg,
		m:     uint64(m),
		k:     uint64(k),
		slots: make([]slot, cfg.Generations),
	}
	for i := range f.slots {
		bf := bloom.New(m, k)
		f.slots[i] = slot{bf: bf, words: bf.BitSet().Words()}
	}
	f.setCurrent(gen)
	return f
}

// setCurrent makes gen the newest generation, held by slots[head].
func (f *Filter) setCurrent(gen uint64) {
	f.cur = gen
	f.nlive = f.cfg.Generations
	if gen < uint64(f.cfg.Generations-1) {
		f.nlive = int(gen) + 1
	}
}

// slotOf returns the slot of generation Current()-age, age < Generations.
func (f *Filter) slotOf(age int) int {
	idx := f.head - age
	if idx < 0 {
		idx += len(f.slots)
	}
	return idx
}

func (f *Filter) prev(idx int) int {
	if idx == 0 {
		return len(f.slots) - 1
	}
	return idx - 1
}

// Config returns the configuration the filter was built with.
func (f *Filter) Config() Config { return f.cfg }

// Current returns the newest generation.
func (f *Filter) Current() uint64 { return f.cur }

// Oldest returns the oldest live generation.
func (f *Filter) Oldest() uint64 { return f.cur - uint64(f.nlive-1) }

// Live reports whether gen is a live generation.
func (f *Filter) Live(gen uint64) bool {
	return gen <= f.cur && f.cur-gen < uint64(f.nlive)
}

// Advance makes gen the newest generation and forgets the generations that
// fall out of [gen-Generations+1, gen]. Their bitsets are cleared and reused:
// Advance never allocates. A gen below Current is ignored, so a clock that
// steps back cannot drop live keys. Clearing costs one memclr of a
// generation's bitset per generation dropped.
func (f *Filter) Advance(gen uint64) {
	if gen <= f.cur {
		return
	}
	steps := gen - f.cur
	if steps >= uint64(len(f.slots)) {
		for i := range f.slots {
			f.slots[i].reset()
		}
		f.setCurrent(gen)
		return
	}
	for range steps {
		f.head++
		if f.head == len(f.slots) {
			f.head = 0
		}
		f.slots[f.head].reset()
	}
	f.setCurrent(gen)
}

func (s *slot) reset() {
	s.bf.ClearAll()
	s.added = 0
}

// Test reports whether h may have been added to a live generation. False means
// definitely not: a key added to a generation that is still live always tests
// true.
func (f *Filter) Test(h partition.Hash) bool {
	return f.match(h, true) != 0
}

// Candidates appends to dst the live generations whose sub-filter may hold h,
// newest first, and returns the extended slice. Every live generation h was
// added to is among them. With cap(dst)-len(dst) >= Generations it does not
// allocate.
func (f *Filter) Candidates(h partition.Hash, dst []uint64) []uint64 {
	for mask := f.match(h, false); mask != 0; mask &= mask - 1 {
		dst = append(dst, f.cur-uint64(bits.TrailingZeros64(mask)))
	}
	return dst
}

// Add records h in the newest generation.
func (f *Filter) Add(h partition.Hash) {
	s := &f.slots[f.head]
	insert(s.words, f.m, f.k, h)
	s.added++
}

// AddTo records h in generation gen, for rebuilding the filter from a scan of
// the exact store. It returns false, and records nothing, if gen is not live.
func (f *Filter) AddTo(gen uint64, h partition.Hash) bool {
	if !f.Live(gen) {
		return false
	}
	s := &f.slots[f.slotOf(int(f.cur-gen))]
	insert(s.words, f.m, f.k, h)
	s.added++
	return true
}

// Tag returns the caller's tag, saved with snapshots.
func (f *Filter) Tag() uint64 { return f.tag }

// SetTag sets an opaque value saved with snapshots. The pipeline stores the
// state-store commit sequence the filter covers, so that after ReadFrom it
// knows which later store entries to replay with AddTo.
func (f *Filter) SetTag(tag uint64) { f.tag = tag }

// String describes the filter for logs.
func (f *Filter) String() string {
	return fmt.Sprintf("filter{gens %d..%d of %d, %d bits x %d probes each}", f.Oldest(), f.cur, f.cfg.Generations, f.m, f.k)
}
