package statestore

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	"github.com/dedupstream/dedupstream/partition"
)

// Load records the keys of b and st like Commit, for a bulk restore from
// the output topic: the keys are only appended to a buffer (no commit log,
// no hash index), sorted in chunks as it fills. Each time it holds
// MemTableSize worth of keys the flusher sorts it and spills it to a file;
// when the load ends, one merge of the spills writes each generation's
// keys as one run, with the state of the last Load (see loadspill.go). A
// crash before then loses the Loads (the store reopens at its state before
// them, from which the restore reads again); a load of more than
// loadMaxSpills buffers is also written as runs every loadMaxSpills
// buffers, so a crash loses at most that many.
//
// Loaded keys are not visible to reads until the load ends: the next
// Commit, Expire, Flush, Compact, Close or read (OpenReader, Get, Lookup,
// ScanGeneration, Generations) first writes them as runs and waits for
// them, so every read still sees every key loaded before it.
func (s *Store) Load(b *Batch, st State) (State, error) {
	if b.s != s {
		return State{}, fmt.Errorf("statestore: load: batch belongs to another store")
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	defer b.Reset()
	if err := s.usable(); err != nil {
		return State{}, err
	}
	if s.opts.ReadOnly {
		return State{}, errReadOnly
	}
	floor := s.floorGen()
	if len(b.entries) > 0 && b.minGen < floor {
		return State{}, fmt.Errorf("statestore: load: %w: generation %d is below the floor %d", ErrExpiredGeneration, b.minGen, floor)
	}
	if !s.loading.Load() && s.active.len() > 0 {
		// The index's commits are older than the Loads: their run (and
		// state) must be recorded first.
		if err := s.handOver(false); err != nil {
			return State{}, err
		}
	}
	st.Seq = s.state.Seq + 1
	if s.loadBuf == nil {
		// The buffer the flusher is done with, if any: its chunks and sort
		// scratch are reused.
		s.loadBuf, s.loadSpare = s.loadSpare, nil
		if s.loadBuf == nil {
			s.loadBuf = &loadBuffer{}
		}
		s.loadBuf.reset()
	}
	s.loadBuf.add(b.entries)
	s.mu.Lock()
	s.state.Seq, s.state.Generation = st.Seq, st.Generation
	s.state.Checkpoint = append(s.state.Checkpoint[:0], st.Checkpoint...)
	s.mu.Unlock()
	s.loading.Store(true)
	if uint64(s.loadBuf.n) >= s.memKeys {
		if err := s.handOverLoad(s.spill.posted >= loadMaxSpills); err != nil {
			return State{}, err
		}
	}
	return st, nil
}

// handOverLoad passes the load buffer (nil: none) to the flusher, to
// spill, or (final) to write with the spills as runs. Under wmu.
func (s *Store) handOverLoad(final bool) error {
	prev := s.job
	if err := s.awaitFlush(); err != nil {
		return err
	}
	if prev != nil && prev.loaded != nil && s.loadBuf != nil {
		// Done with: its chunks fill next, its merge output serves this
		// buffer (one merge at a time: one output array).
		s.loadSpare = prev.loaded
		s.loadBuf.sorted, s.loadSpare.sorted = s.loadSpare.sorted, nil
	}
	if s.loadBuf != nil {
		s.loadBuf.seal() // here, not on the flusher
	}
	s.mu.Lock()
	st := s.state
	st.Checkpoint = append([]byte(nil), s.state.Checkpoint...)
	floor := s.floor
	s.mu.Unlock()
	job := &flushJob{loaded: s.loadBuf, state: st, floor: floor, done: make(chan struct{})}
	s.loadBuf = nil
	s.job = job
	if final {
		if s.spill.posted >= loadMaxSpills {
			s.spill.capped++
		}
		s.spill.posted = 0
	} else {
		s.spill.posted++
	}
	if !s.postLoad(job, final) {
		return s.fatal.get()
	}
	return nil
}

// finishLoad writes what Load buffered and spilled as runs and waits for
// them. Under wmu.
func (s *Store) finishLoad() error {
	if !s.loading.Load() {
		return nil
	}
	if (s.loadBuf != nil && s.loadBuf.n > 0) || s.spill.posted > 0 {
		if err := s.handOverLoad(true); err != nil {
			return err
		}
	}
	if err := s.awaitFlush(); err != nil {
		return err
	}
	s.loading.Store(false)
	// The buffers go with the load: 32 bytes per key in each of three
	// (the one filling, the one the flusher sorts and its output), about
	// twice MemTableSize.
	s.loadSpare = nil
	s.loadBuf = nil
	if s.job != nil {
		s.job.loaded = nil
	}
	return nil
}

// endLoad is finishLoad for readers, which do not hold wmu.
func (s *Store) endLoad() error {
	if !s.loading.Load() {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	return s.finishLoad()
}

// loadChunkKeys is how many keys one chunk of a load buffer holds (4 MiB).
const loadChunkKeys = 128 << 10

// loadBuffer holds the keys of Loads in arrival order, in fixed chunks, so
// that it grows without copying what it holds (growing one slice by
// doubling copied every key about once more and cleared each new array:
// BenchmarkRestore profile). Each chunk is sorted when it fills, on the
// loading goroutine (the stage's, which waits on the reader and has time to
// spare), so the flusher, which writes the runs, only merges sorted chunks
// (sortLoaded) before it spills or writes them. A buffer goes to the flusher whole and comes back for reuse
// (Store.loadSpare).
type loadBuffer struct {
	chunks [][]memEntry // full (loadChunkKeys) and sorted but the last
	n      int          // keys held
	used   int          // chunks in use: chunks[used:] are spare
	open   bool         // chunks[used-1] is not sorted yet

	scratch []memEntry // sortChunk's
	counts  []uint32   // sortChunk's buckets
	sorted  []memEntry // sortLoaded's output
	heap    []int      // sortLoaded's cursors
	pos     []int
}

func (lb *loadBuffer) reset() {
	for i := range lb.used {
		lb.chunks[i] = lb.chunks[i][:0]
	}
	lb.n, lb.used, lb.open = 0, 0, false
}

// add appends the keys of es (one Load's batch) in order.
func (lb *loadBuffer) add(es []entry) {
	for len(es) > 0 {
		if !lb.open {
			if lb.used == len(lb.chunks) {
				// The first chunk starts small and grows by appends (a
				// restore after a crash may load a few keys only).
				size := loadChunkKeys
				if lb.used == 0 {
					size = 4 << 10
				}
				lb.chunks = append(lb.chunks, make([]memEntry, 0, size))
			}
			lb.used++
			lb.open = true
		}
		c := &lb.chunks[lb.used-1]
		n := min(len(es), loadChunkKeys-len(*c))
		for _, e := range es[:n] {
			*c = append(*c, memEntry{gen: e.gen, h: e.h, version: e.version})
		}
		lb.n += n
		es = es[n:]
		if len(*c) == loadChunkKeys {
			lb.seal()
		}
	}
}

// seal sorts the open chunk; the next key starts a new one.
func (lb *loadBuffer) seal() {
	if lb.open {
		lb.sortChunk(lb.chunks[lb.used-1])
		lb.open = false
	}
}

// sortChunk sorts c by (gen, hash), stably: of equal keys the one loaded
// last stays last.
//
// Within a generation the hashes are uniform, so one counting pass on the
// top bits of Hi (about four keys per bucket) and a scatter put every key
// within a few places of its own; an insertion sort finishes. The scatter
// keeps arrival order inside a bucket and the insertion sort moves a key
// only past greater ones, which keeps the sort stable.
func (lb *loadBuffer) sortChunk(c []memEntry) {
	if len(c) < 2 {
		return
	}
	// The generations of the chunk: few, usually one.
	type genCount struct {
		gen   uint64
		n     int
		shift uint // bucket of a hash: Hi >> shift (64: one bucket)
		base  int  // first bucket
	}
	var gens []genCount
	gi := 0
	find := func(gen uint64) int {
		if gi < len(gens) && gens[gi].gen == gen {
			return gi
		}
		for i := range gens {
			if gens[i].gen == gen {
				return i
			}
		}
		gens = append(gens, genCount{gen: gen})
		return len(gens) - 1
	}
	for i := range c {
		gi = find(c[i].gen)
		gens[gi].n++
	}
	slices.SortFunc(gens, func(a, b genCount) int { return cmp.Compare(a.gen, b.gen) })
	buckets := 0
	for i := range gens {
		b := max(0, bits.Len(uint(gens[i].n))-2)
		gens[i].shift, gens[i].base = uint(64-b), buckets
		buckets += 1 << b
	}
	if cap(lb.counts) < buckets+1 {
		lb.counts = make([]uint32, buckets+1)
	}
	counts := lb.counts[:buckets+1]
	clear(counts)
	bucket := func(g *genCount, h partition.Hash) int {
		if g.shift == 64 {
			return g.base
		}
		return g.base + int(h.Hi>>g.shift)
	}
	gi = 0
	for i := range c {
		gi = find(c[i].gen)
		counts[1+bucket(&gens[gi], c[i].h)]++
	}
	for i := 1; i <= buckets; i++ {
		counts[i] += counts[i-1]
	}
	if cap(lb.scratch) < len(c) {
		lb.scratch = make([]memEntry, len(c))
	}
	out := lb.scratch[:len(c)]
	gi = 0
	for i := range c {
		gi = find(c[i].gen)
		d := bucket(&gens[gi], c[i].h)
		out[counts[d]] = c[i]
		counts[d]++
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && lessMem(&out[j], &out[j-1]); j-- {
			out[j-1], out[j] = out[j], out[j-1]
		}
	}
	copy(c, out)
}

// sortLoaded returns the keys of lb sorted by (gen, hash), with only the
// last Load of each key; the result lives in lb's scratch until its next
// sort. It seals the open chunk, then merges the sorted chunks with a heap
// of cursors; of equal keys the one of the earlier chunk comes first, so
// the last loaded ends last and wins.
func sortLoaded(lb *loadBuffer) []memEntry {
	lb.seal()
	chunks := lb.chunks[:lb.used]
	if cap(lb.sorted) < lb.n {
		lb.sorted = make([]memEntry, lb.n)
	}
	out := lb.sorted[:0]
	pos := append(lb.pos[:0], make([]int, len(chunks))...)
	less := func(a, b int) bool { // cursor a's key before cursor b's
		x, y := &chunks[a][pos[a]], &chunks[b][pos[b]]
		if x.gen == y.gen && x.h == y.h {
			return a < b
		}
		return lessMem(x, y)
	}
	h := lb.heap[:0]
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			m := l
			if r := l + 1; r < len(h) && less(h[r], h[l]) {
				m = r
			}
			if !less(h[m], h[i]) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for i := range chunks {
		if len(chunks[i]) > 0 {
			h = append(h, i)
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	for len(h) > 0 {
		top := h[0]
		e := &chunks[top][pos[top]]
		if k := len(out); k > 0 && out[k-1].gen == e.gen && out[k-1].h == e.h {
			out[k-1] = *e
		} else {
			out = append(out, *e)
		}
		if pos[top]++; pos[top] == len(chunks[top]) {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		down(0)
	}
	lb.heap, lb.pos = h, pos
	return out
}

// lessMem orders entries by (gen, hash): compareMem's order, in direct
// comparisons (a third cheaper in the sorts above).
func lessMem(a, b *memEntry) bool {
	if a.gen != b.gen {
		return a.gen < b.gen
	}
	if a.h.Hi != b.h.Hi {
		return a.h.Hi < b.h.Hi
	}
	return a.h.Lo < b.h.Lo
}
