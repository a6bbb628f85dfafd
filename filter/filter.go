package filter

import (
	"fmt"
	"math/bits"
	"runtime"
	"unsafe"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/dedupstream/dedupstream/partition"
)

// Filter is a generational Bloom filter over 128-bit key hashes. It keeps
// Config.Generations live generations: the newest, Current(), and the older
// ones down to Current()-Generations+1 (none below generation 0). A
// generation that fills up grows by another sub-filter (see the package
// documentation).
//
// A Filter is not safe for concurrent use: it belongs to one stage.
type Filter struct {
	cfg     Config
	m, k    uint64 // bits and probes of every generation's first sub-filter
	log     uint64 // log2 of its blocks' bits
	bw      uint64 // words per block of the first sub-filters
	nblocks uint64 // their blocks: m / 2^log
	full0   uint64 // the first sub-filters' full threshold

	// rows holds the first sub-filters of every slot, block index by block
	// index: row b is the block b of slot 0, then of slot 1, and so on,
	// stride words in all. A key's blocks in every generation therefore
	// share one cache line (with 4 generations of 128-bit blocks; two
	// adjacent lines with 8): a probe of the whole window is one miss,
	// not one per generation (see "Probing" in the package documentation).
	rows   []uint64
	stride uint64

	cur   uint64 // newest generation
	nlive int    // live generations: min(Generations, cur+1)
	head  int    // slots[head] holds cur, slots[head-i mod G] holds cur-i
	slots []slot
	grown uint64 // bit i set: slots[i] has more than one sub-filter
	// live holds the offsets in a row of the first sub-filters of the
	// live generations that hold a key, newest first, and liveBit their
	// bits in a mask (1<<i for generation cur-i): the probe loops walk it
	// instead of the ring of slots. A generation whose first sub-filter has no bit set
	// cannot match, so it costs no cache line: a window not yet full (a
	// new job, a stream shorter than the window) reads only the
	// generations it filled. setCurrent, ReadFrom and the first insert
	// into an empty generation rebuild it.
	live    []uint64
	liveBit []uint64
	tag     uint64
	mark    uint64
	mem     *arena // the bitsets mapped outside the Go heap
}

// slot is one generation: its first sub-filter, which every generation has
// and which has the filter-wide m and k, and the ones it grew since it took
// this generation.
type slot struct {
	subs  []sub  // subs[0] first; Add and AddTo insert into the last one
	added uint64 // Add/AddTo calls since the slot took this generation
}

// sub is one Bloom sub-filter: block b is the bw words at
// words[b*stride+lane]. A grown sub-filter's bitset is its own (stride bw,
// lane 0), owned by the bloom filter bf, which words aliases so probes
// skip the method calls; a first sub-filter is a lane of the Filter's rows
// and has no bf.
type sub struct {
	bf           *bloom.BloomFilter
	words        []uint64
	stride, lane uint64
	m, k         uint64
	log, bw      uint64 // log2 of a block's bits, and its words
	nblocks      uint64 // m / 2^log
	ones         uint64 // bits set, counted as they are set
	full         uint64 // ones at which the sub-filter is full: the next one is added
}

// New returns an empty filter whose newest generation is gen.
func New(cfg Config, gen uint64) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newFilter(cfg, gen), nil
}

// newFilter allocates the first sub-filter of every generation of a valid
// cfg.
func newFilter(cfg Config, gen uint64) *Filter {
	first := cfg.shape(0)
	f := &Filter{
		cfg:     cfg,
		m:       first.m,
		k:       first.k,
		log:     first.log,
		bw:      1 << (first.log - 6),
		nblocks: first.m >> first.log,
		full0:   first.full,
		stride:  uint64(cfg.Generations) << (first.log - 6),
		slots:   make([]slot, cfg.Generations),
		live:    make([]uint64, 0, cfg.Generations),
		liveBit: make([]uint64, 0, cfg.Generations),
		mem:     &arena{},
	}
	runtime.AddCleanup(f, (*arena).release, f.mem)
	f.rows = f.mem.alloc(int(f.nblocks * f.stride))
	for i := range f.slots {
		f.slots[i] = slot{subs: []sub{{
			words: f.rows, stride: f.stride, lane: uint64(i) * f.bw,
			m: first.m, k: first.k, log: f.log, bw: f.bw, nblocks: f.nblocks, full: first.full,
		}}}
	}
	f.setCurrent(gen)
	return f
}

// newSub returns an empty sub-filter of shape sh whose bitset a allocates.
func (a *arena) newSub(sh shape) sub {
	words := a.alloc(int(sh.m / 64))
	bf := bloom.FromWithM(words, uint(sh.m), uint(sh.k))
	bw := uint64(1) << (sh.log - 6)
	return sub{bf: bf, words: words, stride: bw, m: sh.m, k: sh.k, log: sh.log, bw: bw, nblocks: sh.m >> sh.log, full: sh.full}
}

// setCurrent makes gen the newest generation, held by slots[head].
func (f *Filter) setCurrent(gen uint64) {
	f.cur = gen
	f.nlive = f.cfg.Generations
	if gen < uint64(f.cfg.Generations-1) {
		f.nlive = int(gen) + 1
	}
	f.relink()
}

// relink rebuilds f.live and f.liveBit from the slots: the live
// generations whose first sub-filter holds a bit.
func (f *Filter) relink() {
	f.live, f.liveBit = f.live[:0], f.liveBit[:0]
	idx := f.head
	for i := range f.nlive {
		if f.slots[idx].subs[0].ones > 0 {
			f.live = append(f.live, f.slots[idx].subs[0].lane)
			f.liveBit = append(f.liveBit, 1<<i)
		}
		idx = f.prev(idx)
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
// fall out of [gen-Generations+1, gen], each with all its sub-filters. Their
// first sub-filters are cleared and reused, so Advance never allocates; the
// sub-filters they grew are released. A gen below Current is ignored, so a
// clock that steps back cannot drop live keys. Clearing a first sub-filter
// zeroes its lane of every row, a pass over the rows (all generations'
// lines), for each generation dropped that held a key; one that never did
// is left as it is. BenchmarkAdvance, window=10M: 1.9-2.3 ms per
// rotation, against 0.2-0.5 ms for the memclr of a bitset of its own
// before the rows; about 20 ms at 100M keys, once per generation span.
func (f *Filter) Advance(gen uint64) {
	if gen <= f.cur {
		return
	}
	steps := gen - f.cur
	if steps >= uint64(len(f.slots)) {
		for i := range f.slots {
			f.reset(i)
		}
		f.setCurrent(gen)
		return
	}
	for range steps {
		f.head++
		if f.head == len(f.slots) {
			f.head = 0
		}
		f.reset(f.head)
	}
	f.setCurrent(gen)
}

// reset empties slots[idx] for a new generation.
func (f *Filter) reset(idx int) {
	s := &f.slots[idx]
	for j := 1; j < len(s.subs); j++ {
		f.mem.free(s.subs[j].words)
	}
	clear(s.subs[1:])
	s.subs = s.subs[:1]
	// Every bit is set through insertPattern or ReadFrom, which count it:
	// a first sub-filter with no bit counted is all zero already, and
	// clearing it would only write its pages (and fault in those never
	// touched: a window that is not yet full, as in a new job, rotates
	// into generations that never held a key, each a pass over a whole
	// sub-filter on the stage's goroutine).
	if s.subs[0].ones != 0 {
		s.subs[0].clear()
	}
	s.subs[0].ones = 0
	s.subs[0].full = f.full0
	s.added = 0
	f.grown &^= 1 << idx
}

// Test reports whether h may have been added to a live generation. False means
// definitely not: a key added to a generation that is still live always tests
// true.
func (f *Filter) Test(h partition.Hash) bool {
	ok := f.match(h, true) != 0
	runtime.KeepAlive(f) // the bitsets may be unmapped once f is unreachable
	return ok
}

// Mask returns the live generations whose sub-filters may hold h as a bit
// mask: bit i stands for generation Current()-i. Every live generation h
// was added to is in it. It is Candidates without the slice, for a caller
// that probes a whole batch of keys before deciding any (the CPU then
// overlaps the cache misses of consecutive keys).
func (f *Filter) Mask(h partition.Hash) uint64 {
	m := f.match(h, false)
	runtime.KeepAlive(f)
	return m
}

// Candidates appends to dst the live generations whose sub-filters may hold
// h, newest first, and returns the extended slice. Every live generation h
// was added to is among them. With cap(dst)-len(dst) >= Generations it does
// not allocate.
func (f *Filter) Candidates(h partition.Hash, dst []uint64) []uint64 {
	for mask := f.match(h, false); mask != 0; mask &= mask - 1 {
		dst = append(dst, f.cur-uint64(bits.TrailingZeros64(mask)))
	}
	runtime.KeepAlive(f)
	return dst
}

// Add records h in the newest generation.
func (f *Filter) Add(h partition.Hash) {
	f.insert(f.head, h)
	runtime.KeepAlive(f)
}

// addAhead is how many keys AddAll prefetches ahead of the one it inserts.
const addAhead = 16

// AddAll records every hash of hs in the newest generation, as Add does one
// at a time (the same bits, counts and growth). Before inserting key i it
// prefetches key i+addAhead's block in the sub-filter that receives the
// keys, so the cache misses of several keys are in flight at once instead of
// one insert at a time (BenchmarkAddAll; a bulk restore adds millions of
// keys into a filter larger than the caches).
func (f *Filter) AddAll(hs []partition.Hash) {
	s := &f.slots[f.head]
	for i := range hs {
		if j := i + addAhead; j < len(hs) {
			last := &s.subs[len(s.subs)-1]
			prefetch(uintptr(unsafe.Pointer(&last.words[last.blockAt(hs[j])])))
		}
		f.insert(f.head, hs[i])
	}
	runtime.KeepAlive(f)
}

// AddTo records h in generation gen, for rebuilding the filter from a scan of
// the exact store. It returns false, and records nothing, if gen is not live.
func (f *Filter) AddTo(gen uint64, h partition.Hash) bool {
	if !f.Live(gen) {
		return false
	}
	f.insert(f.slotOf(int(f.cur-gen)), h)
	runtime.KeepAlive(f)
	return true
}

// insert records h in the last sub-filter of slots[idx] and grows the slot
// when that sub-filter is full.
func (f *Filter) insert(idx int, h partition.Hash) {
	s := &f.slots[idx]
	last := &s.subs[len(s.subs)-1]
	empty := last.ones == 0 && len(s.subs) == 1
	last.ones += last.insert(h)
	s.added++
	if empty {
		f.relink() // the generation's first key: probe it from now on
	}
	if last.ones >= last.full {
		f.grow(idx)
	}
}

// grow adds the next sub-filter to slots[idx], unless the generation has
// reached its limit (Config.maxSubs); its last sub-filter then fills up
// further and its false-positive rate rises, which Stats shows.
func (f *Filter) grow(idx int) {
	s := &f.slots[idx]
	n := len(s.subs)
	if n >= f.cfg.maxSubs() {
		s.subs[n-1].full = s.subs[n-1].m + 1 // stop asking
		return
	}
	s.subs = append(s.subs, f.mem.newSub(f.cfg.shape(n)))
	f.grown |= 1 << idx
}

// Tag returns the caller's tag, saved with snapshots.
func (f *Filter) Tag() uint64 { return f.tag }

// SetTag sets an opaque value saved with snapshots. The pipeline stores the
// state-store commit sequence the filter covers, so that after ReadFrom it
// knows which later store entries to replay with AddTo.
func (f *Filter) SetTag(tag uint64) { f.tag = tag }

// Mark returns the caller's second tag, saved with snapshots.
func (f *Filter) Mark() uint64 { return f.mark }

// SetMark sets a second opaque value saved with snapshots. The pipeline
// stores the state store's next run id at Tag (statestore.Mark), so that
// after a crash it replays only the runs written since, not whole
// generations.
func (f *Filter) SetMark(mark uint64) { f.mark = mark }

// String describes the filter for logs.
func (f *Filter) String() string {
	subs := 0
	for i := range f.slots {
		subs += len(f.slots[i].subs)
	}
	return fmt.Sprintf("filter{gens %d..%d of %d, %d bits x %d probes each, %d sub-filters}", f.Oldest(), f.cur, f.cfg.Generations, f.m, f.k, subs)
}
