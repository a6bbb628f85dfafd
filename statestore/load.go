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
// no hash index), in arrival order. Each time it holds MemTableSize worth
// of keys the flusher sorts it and writes each of its generations as one
// run, recorded with the state of the buffer's last Load (see
// loadwrite.go): a durable point of the load. A crash loses the Loads
// since the last one (the store reopens at its state then, from which the
// restore reads again), at most a buffer's worth.
//
// The keys of the buffer being filled are not visible to reads until the
// load ends: the next Commit, Expire, Flush, Compact, Close or read
// (OpenReader, Get, Lookup, ScanGeneration, Generations) first writes them
// as runs and waits for them, so every read still sees every key loaded
// before it.
func (s *Store) Load(b *Batch, st State) (State, error) {
	if b.s != s {
		return State{}, fmt.Errorf("statestore: load: batch belongs to another store")
	}
	defer b.Reset()
	return s.loadKeys(len(b.entries), b.minGen, st, func(lb *loadBuffer) { lb.add(b.entries) })
}

// LoadHashes is Load for keys of one generation, gen: hs in order, with
// versions (nil: all 0; ignored outside version mode, as Batch.Put
// ignores them), the last of equal hashes winning. It spares the restore
// a Batch: each key is copied once, into the load buffer.
func (s *Store) LoadHashes(gen uint64, hs []partition.Hash, versions []uint64, st State) (State, error) {
	if versions != nil && len(versions) != len(hs) {
		return State{}, fmt.Errorf("statestore: load: %d versions for %d hashes", len(versions), len(hs))
	}
	vm := s.opts.VersionMode
	return s.loadKeys(len(hs), gen, st, func(lb *loadBuffer) { lb.addHashes(gen, hs, versions, vm) })
}

// loadKeys is Load and LoadHashes: n keys, of generations minGen and above,
// appended to the load buffer by add.
func (s *Store) loadKeys(n int, minGen uint64, st State, add func(*loadBuffer)) (State, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.usable(); err != nil {
		return State{}, err
	}
	if s.opts.ReadOnly {
		return State{}, errReadOnly
	}
	floor := s.floorGen()
	if n > 0 && minGen < floor {
		return State{}, fmt.Errorf("statestore: load: %w: generation %d is below the floor %d", ErrExpiredGeneration, minGen, floor)
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
	add(s.loadBuf)
	s.mu.Lock()
	s.state.Seq, s.state.Generation = st.Seq, st.Generation
	s.state.Checkpoint = append(s.state.Checkpoint[:0], st.Checkpoint...)
	s.mu.Unlock()
	s.loading.Store(true)
	if uint64(s.loadBuf.n) >= s.memKeys {
		s.loadWrites++
		if err := s.handOverLoad(); err != nil {
			return State{}, err
		}
	}
	return st, nil
}

// handOverLoad passes the load buffer to the flusher, to write as runs
// with the state of its last Load. Under wmu.
func (s *Store) handOverLoad() error {
	prev := s.job
	if err := s.awaitFlush(); err != nil {
		return err
	}
	if prev != nil && prev.loaded != nil {
		// Done with: its chunks fill next, its sort output serves this
		// buffer (one write at a time: one output array).
		s.loadSpare = prev.loaded
		s.loadBuf.sorted, s.loadSpare.sorted = s.loadSpare.sorted, nil
	}
	s.mu.Lock()
	st := s.state
	st.Checkpoint = append([]byte(nil), s.state.Checkpoint...)
	floor := s.floor
	s.mu.Unlock()
	job := &flushJob{loaded: s.loadBuf, state: st, floor: floor, done: make(chan struct{})}
	s.loadBuf = nil
	s.job = job
	if !s.postLoad(job) {
		return s.fatal.get()
	}
	return nil
}

// finishLoad writes what Load still buffers as runs and waits for them.
// Under wmu.
func (s *Store) finishLoad() error {
	if !s.loading.Load() {
		return nil
	}
	// Even an empty buffer: its Loads' state (Seq) must be recorded before
	// the next Commit is logged. Left out, the log held a Commit whose Seq
	// followed a Load only memory knew of, and replay stopped at that gap:
	// the Commit, and every later one, was lost after a crash, Flush or
	// not (TestEmptyLoadThenCommit; a restore batch of unkeyed records
	// loads no key).
	if s.loadBuf != nil {
		if err := s.handOverLoad(); err != nil {
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
// BenchmarkRestore profile). The loading goroutine only appends; the
// flusher sorts the whole buffer at once (sortLoaded) before it writes
// it. A buffer goes to the flusher whole and comes back for reuse
// (Store.loadSpare).
type loadBuffer struct {
	chunks [][]memEntry // full (loadChunkKeys) but the last in use
	n      int          // keys held
	used   int          // chunks in use: chunks[used:] are spare
	gen    uint64       // the generation of every key held, unless mixed
	mixed  bool         // the keys held are of several generations

	sorted []memEntry   // sortLoaded's output
	counts []uint32     // sortLoaded's buckets
	gens   []loadGen    // sortLoaded's generations
	radix  radixScratch // sortLoaded's bucket sorts
}

func (lb *loadBuffer) reset() {
	for i := range lb.used {
		lb.chunks[i] = lb.chunks[i][:0]
	}
	lb.n, lb.used, lb.mixed = 0, 0, false
}

// tail returns the chunk the next key goes to, with room for one at least.
func (lb *loadBuffer) tail() *[]memEntry {
	if lb.used > 0 && len(lb.chunks[lb.used-1]) < loadChunkKeys {
		return &lb.chunks[lb.used-1]
	}
	if lb.used == len(lb.chunks) {
		// The first chunk starts small and grows by appends (a restore
		// after a crash may load a few keys only).
		size := loadChunkKeys
		if lb.used == 0 {
			size = 4 << 10
		}
		lb.chunks = append(lb.chunks, make([]memEntry, 0, size))
	}
	lb.used++
	return &lb.chunks[lb.used-1]
}

// noteGen records that keys of gen are held.
func (lb *loadBuffer) noteGen(gen uint64) {
	if lb.n == 0 {
		lb.gen = gen
	} else if gen != lb.gen {
		lb.mixed = true
	}
}

// add appends the keys of es (one Load's batch) in order.
func (lb *loadBuffer) add(es []entry) {
	for len(es) > 0 {
		c := lb.tail()
		n := min(len(es), loadChunkKeys-len(*c))
		for _, e := range es[:n] {
			lb.noteGen(e.gen)
			*c = append(*c, memEntry{gen: e.gen, h: e.h, version: e.version})
			lb.n++
		}
		es = es[n:]
	}
}

// addHashes appends hs, keys of gen, with versions (nil: all 0; ignored
// unless vm) in order.
func (lb *loadBuffer) addHashes(gen uint64, hs []partition.Hash, versions []uint64, vm bool) {
	if !vm {
		versions = nil
	}
	for len(hs) > 0 {
		c := lb.tail()
		n := min(len(hs), loadChunkKeys-len(*c))
		lb.noteGen(gen)
		if versions == nil {
			for _, h := range hs[:n] {
				*c = append(*c, memEntry{gen: gen, h: h})
			}
		} else {
			for i, h := range hs[:n] {
				*c = append(*c, memEntry{gen: gen, h: h, version: versions[i]})
			}
			versions = versions[n:]
		}
		lb.n += n
		hs = hs[n:]
	}
}

// loadGen is one generation of a buffer sortLoaded sorts: its keys take
// buckets [base, base+1<<bits), by the top bits of Hi.
type loadGen struct {
	gen  uint64
	n    int
	bits uint
	base int
}

// loadBucketKeys bounds how many keys one bucket of sortLoaded's first
// pass receives (half to all of it): a bucket (128-256 KiB) is then sorted
// within the caches, and the scatter writes to a few hundred places at
// once. 1k, 4k and 8k measured the same (BenchmarkSortLoaded).
const loadBucketKeys = 8 << 10

// sortLoaded returns the keys of lb sorted by (gen, hash), with only the
// last Load of each key; the result lives in lb.sorted until its next sort.
//
// Within a generation the hashes are uniform, so a radix sort on the top
// bits of Hi needs no comparisons but the last few: a counting pass and a
// scatter put the keys into buckets of at most loadBucketKeys (per
// generation, in generation order); each bucket, now in cache, is
// scattered again by its next bits into sub-buckets of about four keys,
// and an insertion sort finishes. Both scatters keep arrival order within
// a bucket, and the insertion sort moves a key only past greater ones, so
// the sort is stable: of equal keys the one loaded last ends last, and it
// is the one kept. Before, each 128k-key chunk was sorted this way and the
// chunks were merged with a heap of cursors: 160-180 ns of CPU per key
// of 1.4M, against 85-95 now (BenchmarkSortLoaded, add and sort, on a
// loaded machine).
func sortLoaded(lb *loadBuffer) []memEntry {
	n := lb.n
	if cap(lb.sorted) < n {
		lb.sorted = make([]memEntry, n)
	}
	out := lb.sorted[:n]
	if n == 0 {
		return out
	}
	chunks := lb.chunks[:lb.used]
	gens := lb.gens[:0]
	if !lb.mixed {
		gens = append(gens, loadGen{gen: lb.gen, n: n})
	} else {
		gi := 0
		for _, c := range chunks {
			for i := range c {
				gens, gi = findGen(gens, gi, c[i].gen)
				gens[gi].n++
			}
		}
		slices.SortFunc(gens, func(a, b loadGen) int { return cmp.Compare(a.gen, b.gen) })
	}
	buckets := 0
	for i := range gens {
		b := uint(max(0, bits.Len(uint(gens[i].n/loadBucketKeys))))
		gens[i].bits, gens[i].base = min(b, 20), buckets
		buckets += 1 << gens[i].bits
	}
	if cap(lb.counts) < buckets+1 {
		lb.counts = make([]uint32, buckets+1)
	}
	counts := lb.counts[:buckets+1]
	clear(counts)
	// The first pass: count, then scatter in arrival order.
	if len(gens) == 1 {
		g := gens[0]
		for _, c := range chunks {
			for i := range c {
				counts[1+topBits(c[i].h.Hi, g.bits)]++
			}
		}
	} else {
		gi := 0
		for _, c := range chunks {
			for i := range c {
				gens, gi = findGen(gens, gi, c[i].gen)
				counts[1+gens[gi].base+topBits(c[i].h.Hi, gens[gi].bits)]++
			}
		}
	}
	for i := 1; i <= buckets; i++ {
		counts[i] += counts[i-1]
	}
	if len(gens) == 1 {
		g := gens[0]
		for _, c := range chunks {
			for i := range c {
				d := topBits(c[i].h.Hi, g.bits)
				out[counts[d]] = c[i]
				counts[d]++
			}
		}
	} else {
		gi := 0
		for _, c := range chunks {
			for i := range c {
				gens, gi = findGen(gens, gi, c[i].gen)
				d := gens[gi].base + topBits(c[i].h.Hi, gens[gi].bits)
				out[counts[d]] = c[i]
				counts[d]++
			}
		}
	}
	// counts[d] is now the end of bucket d. The second pass, bucket by
	// bucket, compacts the kept keys to out[:w] (w never passes the
	// bucket being read).
	w, lo := 0, 0
	for _, g := range gens {
		for d := g.base; d < g.base+1<<g.bits; d++ {
			hi := int(counts[d])
			w = lb.sortBucket(out, lo, hi, w, g.bits)
			lo = hi
		}
	}
	lb.gens = gens
	return out[:w]
}

// topBits returns the top b bits of x (0 when b is 0).
func topBits(x uint64, b uint) int {
	if b == 0 {
		return 0
	}
	return int(x >> (64 - b))
}

// findGen returns the index of gen in gens, adding it if missing; gi is the
// index found last (the keys of a Load usually share one).
func findGen(gens []loadGen, gi int, gen uint64) ([]loadGen, int) {
	if gi < len(gens) && gens[gi].gen == gen {
		return gens, gi
	}
	for i := range gens {
		if gens[i].gen == gen {
			return gens, i
		}
	}
	return append(gens, loadGen{gen: gen}), len(gens)
}

// sortBucket sorts out[lo:hi], keys of one generation whose top b bits of
// Hi are equal, stably, and writes the last of each run of equal keys to
// out[w:], returning the new w (w <= lo).
func (lb *loadBuffer) sortBucket(out []memEntry, lo, hi, w int, b uint) int {
	return w + lb.radix.sortKeepLast(out[lo:hi], out[w:], b)
}

// radixScratch is the scratch of sortKeepLast.
type radixScratch struct {
	tmp []memEntry
	sub []uint32
}

// sortKeepLast sorts in, keys of one generation whose top b bits of Hi are
// equal, by hash, stably, and writes the last of each run of equal keys
// to out, returning how many. out may be in, or start before it.
//
// The keys are scattered by the next bits of Hi into sub-buckets of about
// four keys, in order, and each sub-bucket is sorted on its own.
func (r *radixScratch) sortKeepLast(in, out []memEntry, b uint) int {
	n := len(in)
	if n == 0 {
		return 0
	}
	if cap(r.tmp) < n {
		r.tmp = make([]memEntry, n+n/4)
	}
	tmp := r.tmp[:n]
	s := uint(max(0, bits.Len(uint(n))-2))
	if s > 0 && b+s <= 64 {
		if cap(r.sub) < 1<<s+1 {
			r.sub = make([]uint32, 1<<s+1)
		}
		sub := r.sub[:1<<s+1]
		clear(sub)
		for i := range in {
			sub[1+(in[i].h.Hi<<b)>>(64-s)]++
		}
		for i := 1; i < len(sub); i++ {
			sub[i] += sub[i-1]
		}
		for i := range in {
			d := (in[i].h.Hi << b) >> (64 - s)
			tmp[sub[d]] = in[i]
			sub[d]++
		}
		// sub[d] is now the end of sub-bucket d.
		start := 0
		for _, end := range sub[:1<<s] {
			sortSmall(tmp[start:end])
			start = int(end)
		}
	} else {
		copy(tmp, in)
		sortSmall(tmp)
	}
	w := 0
	for i := range tmp {
		if i+1 < n && tmp[i+1].h == tmp[i].h {
			continue // a later Load of the same key follows
		}
		out[w] = tmp[i]
		w++
	}
	return w
}

// sortSmall sorts es, keys of one generation, by hash, stably: an
// insertion sort, which moves a key only past greater ones. A long slice
// (many Loads of one key, or hashes sharing their top bits) takes a
// comparison sort instead, stable too.
func sortSmall(es []memEntry) {
	if len(es) > 32 {
		slices.SortStableFunc(es, func(a, b memEntry) int {
			if lessHash(&a.h, &b.h) {
				return -1
			}
			if a.h == b.h {
				return 0
			}
			return 1
		})
		return
	}
	for i := 1; i < len(es); i++ {
		e := es[i]
		j := i
		for j > 0 && lessHash(&e.h, &es[j-1].h) {
			es[j] = es[j-1]
			j--
		}
		es[j] = e
	}
}

// lessHash orders hashes by Hi, then Lo.
func lessHash(a, b *partition.Hash) bool {
	if a.Hi != b.Hi {
		return a.Hi < b.Hi
	}
	return a.Lo < b.Lo
}
