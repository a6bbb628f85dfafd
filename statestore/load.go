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
// no hash index), which the flusher sorts and writes as runs each time it
// holds MemTableSize worth of keys, recording the state of its last Load
// with them. A crash loses the Loads since the last such run, and the store
// reopens at an earlier state, from which the restore reads again.
//
// Loaded keys are not visible to reads until the load ends: the next
// Commit, Expire, Flush, Compact, Close or read (OpenReader, Get, Lookup,
// ScanGeneration, Generations) first writes the buffer as runs and waits for
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
		if err := s.handOverLoad(); err != nil {
			return State{}, err
		}
	}
	return st, nil
}

// handOverLoad passes the load buffer to the flusher. Under wmu.
func (s *Store) handOverLoad() error {
	prev := s.job
	if err := s.awaitFlush(); err != nil {
		return err
	}
	if prev != nil && prev.loaded != nil {
		// Done with: its chunks fill next, its sort scratch sorts this
		// buffer (one sort at a time: one scratch).
		s.loadSpare = prev.loaded
		s.loadBuf.sorted, s.loadSpare.sorted = s.loadSpare.sorted, nil
		s.loadBuf.counts, s.loadSpare.counts = s.loadSpare.counts, nil
	}
	s.mu.Lock()
	st := s.state
	st.Checkpoint = append([]byte(nil), s.state.Checkpoint...)
	floor := s.floor
	s.mu.Unlock()
	job := &flushJob{loaded: s.loadBuf, state: st, floor: floor, done: make(chan struct{})}
	s.loadBuf = nil
	s.job = job
	if !s.postFlush(job) {
		return s.fatal.get()
	}
	return nil
}

// finishLoad writes what Load buffered as runs and waits for them. Under
// wmu.
func (s *Store) finishLoad() error {
	if !s.loading.Load() {
		return nil
	}
	if s.loadBuf != nil && s.loadBuf.n > 0 {
		if err := s.handOverLoad(); err != nil {
			return err
		}
	}
	if err := s.awaitFlush(); err != nil {
		return err
	}
	s.loading.Store(false)
	// The buffers go with the load: about 64 bytes per MemTableSize key.
	s.loadSpare = nil
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

// loadChunkKeys is how many keys one chunk of a load buffer holds (1 MiB).
const loadChunkKeys = 32 << 10

// loadBuffer holds the keys of Loads in arrival order, in fixed chunks, so
// that it grows without copying what it holds (growing one slice by
// doubling copied every key about once more and cleared each new array:
// BenchmarkRestore profile), and the scratch of its sort. A buffer goes to
// the flusher whole and comes back for reuse (Store.loadSpare).
type loadBuffer struct {
	chunks [][]memEntry // full but the last; each of capacity loadChunkKeys
	n      int          // keys held
	used   int          // chunks in use: chunks[used:] are spare
	sorted []memEntry   // sortLoaded's output
	counts []uint32     // sortLoaded's buckets
}

func (lb *loadBuffer) reset() {
	for i := range lb.used {
		lb.chunks[i] = lb.chunks[i][:0]
	}
	lb.n, lb.used = 0, 0
}

// add appends the keys of es (one Load's batch) in order.
func (lb *loadBuffer) add(es []entry) {
	for len(es) > 0 {
		if lb.used == 0 || len(lb.chunks[lb.used-1]) == loadChunkKeys {
			if lb.used == len(lb.chunks) {
				lb.chunks = append(lb.chunks, make([]memEntry, 0, loadChunkKeys))
			}
			lb.used++
		}
		c := &lb.chunks[lb.used-1]
		n := min(len(es), loadChunkKeys-len(*c))
		for _, e := range es[:n] {
			*c = append(*c, memEntry{gen: e.gen, h: e.h, version: e.version})
		}
		lb.n += n
		es = es[n:]
	}
}

// each calls fn for every key in arrival order.
func (lb *loadBuffer) each(fn func(e *memEntry)) {
	for _, c := range lb.chunks[:lb.used] {
		for i := range c {
			fn(&c[i])
		}
	}
}

// sortLoaded sorts the keys of lb by (gen, hash), keeps the last Load of
// each key and returns them; the result lives in lb's scratch until its
// next sort.
//
// Within a generation the hashes are uniform, so one counting pass on the
// top bits of Hi (about four keys per bucket) and a scatter straight from
// the chunks put every key within a few places of its own; an insertion
// sort finishes. The scatter keeps arrival order inside a bucket and the
// insertion sort moves a key only past greater ones, so of equal keys the
// last loaded ends last.
func sortLoaded(lb *loadBuffer) []memEntry {
	// The generations and their keys: few, usually one.
	type genCount struct {
		gen   uint64
		n     int
		shift uint // bucket of a hash: Hi >> shift (64: one bucket)
		base  int  // first bucket
	}
	var gens []genCount
	find := func(gen uint64, last int) int {
		if last < len(gens) && gens[last].gen == gen {
			return last
		}
		for i := range gens {
			if gens[i].gen == gen {
				return i
			}
		}
		gens = append(gens, genCount{gen: gen})
		return len(gens) - 1
	}
	gi := 0
	lb.each(func(e *memEntry) {
		gi = find(e.gen, gi)
		gens[gi].n++
	})
	slices.SortFunc(gens, func(a, b genCount) int { return cmp.Compare(a.gen, b.gen) })
	buckets := 0
	for i := range gens {
		b := max(0, bits.Len(uint(gens[i].n))-2)
		b = min(b, 22)
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
	lb.each(func(e *memEntry) {
		gi = find(e.gen, gi)
		counts[1+bucket(&gens[gi], e.h)]++
	})
	for i := 1; i <= buckets; i++ {
		counts[i] += counts[i-1]
	}
	if cap(lb.sorted) < lb.n {
		lb.sorted = make([]memEntry, lb.n)
	}
	out := lb.sorted[:lb.n]
	gi = 0
	lb.each(func(e *memEntry) {
		gi = find(e.gen, gi)
		d := bucket(&gens[gi], e.h)
		out[counts[d]] = *e
		counts[d]++
	})
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && compareMem(&out[j-1], &out[j]) > 0; j-- {
			out[j-1], out[j] = out[j], out[j-1]
		}
	}
	w := 0
	for i := range out {
		if w > 0 && out[w-1].gen == out[i].gen && out[w-1].h == out[i].h {
			out[w-1] = out[i]
			continue
		}
		out[w] = out[i]
		w++
	}
	return out[:w]
}
