package statestore

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dedupstream/dedupstream/partition"
)

// ErrExpiredGeneration is returned by Commit when the batch writes into a
// generation that Expire already dropped: such a key would be invisible to
// the stage's window yet survive on disk until the next expiry.
var ErrExpiredGeneration = errors.New("statestore: generation already expired")

// batchRetainBytes is how much buffer a Batch keeps across Reset: ~180k
// keys, enough for the largest commit cycle without re-growing each time.
const batchRetainBytes = 8 << 20

// entry is one Put. seq orders Puts of the same key: the last one wins.
type entry struct {
	gen     uint64
	h       partition.Hash
	version uint64
	seq     int
}

func compareEntries(a, b *entry) int {
	if c := cmp.Compare(a.gen, b.gen); c != 0 {
		return c
	}
	if c := cmp.Compare(a.h.Hi, b.h.Hi); c != 0 {
		return c
	}
	if c := cmp.Compare(a.h.Lo, b.h.Lo); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// Batch collects the keys of one commit cycle. It is reused across cycles
// and is not safe for concurrent use.
//
// Puts are kept in a plain slice and written to Pebble in key order at
// Commit: each insert into the memtable skiplist then walks nearly the same
// path as the previous one, which is still in the CPU cache, instead of a
// random one (see "Commits" in the package documentation for the numbers).
type Batch struct {
	s       *Store
	pb      *pebble.Batch
	entries []entry
	tmp     []entry // scratch for sortEntries
	counts  []int   // scratch for sortEntries
	minGen  uint64
	maxGen  uint64
	key     [bucketKeyLen]byte
	val     [maxValueLen]byte
}

// NewBatch returns an empty batch for Commit on s.
func (s *Store) NewBatch() *Batch {
	b := &Batch{s: s}
	b.pb = s.db.NewBatch(pebble.WithMaxRetainedSizeBytes(batchRetainBytes))
	b.minGen, b.maxGen = math.MaxUint64, 0
	return b
}

// Put records that h was emitted in generation gen. version is stored in
// version mode and ignored otherwise; of several Puts of the same (gen, h)
// the last one wins. Put does not allocate once the batch has grown.
func (b *Batch) Put(gen uint64, h partition.Hash, version uint64) {
	b.entries = append(b.entries, entry{gen: gen, h: h, version: version, seq: len(b.entries)})
	b.minGen = min(b.minGen, gen)
	b.maxGen = max(b.maxGen, gen)
}

// Len returns the number of Puts since the last Reset or Commit.
func (b *Batch) Len() int { return len(b.entries) }

// Reset empties the batch, keeping its buffers.
func (b *Batch) Reset() {
	b.pb.Reset()
	b.entries = b.entries[:0]
	b.minGen, b.maxGen = math.MaxUint64, 0
}

// encode sorts the entries and writes them into the Pebble batch.
// encode sorts the entries and writes them into the Pebble batch.
func (b *Batch) encode() {
	b.sortEntries()
	for i := range b.entries {
		e := &b.entries[i]
		if i+1 < len(b.entries) && e.gen == b.entries[i+1].gen && e.h == b.entries[i+1].h {
			continue // a later Put of the same key follows
		}
		putBucketKey(b.key[:], e.gen, e.h)
		var v []byte
		if b.s.opts.VersionMode {
			v = b.val[:binary.PutUvarint(b.val[:], e.version)]
		}
		// Set on an unindexed batch cannot fail.
		_ = b.pb.Set(b.key[:], v, nil)
	}
}

// sortEntries sorts the entries by key; Puts of the same key keep their
// order. The common batch holds one generation of uniformly distributed
// hashes: one stable counting pass on the top bits of Hi, then an insertion
// sort that only moves entries within their (tiny) bucket, costs a few ns
// per key where a comparison sort costs ~0.35 us.
func (b *Batch) sortEntries() {
	n := len(b.entries)
	if n < 64 || b.minGen != b.maxGen {
		slices.SortFunc(b.entries, func(x, y entry) int { return compareEntries(&x, &y) })
		return
	}
	shift := 64 - min(bits.Len(uint(n)), 16) // ~1-2 entries per bucket
	nb := 1 << (64 - shift)
	if cap(b.counts) < nb+1 {
		b.counts = make([]int, nb+1)
	}
	counts := b.counts[:nb+1]
	clear(counts)
	for i := range b.entries {
		counts[1+int(b.entries[i].h.Hi>>shift)]++
	}
	for i := 1; i <= nb; i++ {
		counts[i] += counts[i-1]
	}
	b.tmp = slices.Grow(b.tmp[:0], n)[:n]
	for i := range b.entries {
		e := &b.entries[i]
		d := int(e.h.Hi >> shift)
		b.tmp[counts[d]] = *e
		counts[d]++
	}
	t := b.tmp
	for i := 1; i < n; i++ {
		for j := i; j > 0 && compareEntries(&t[j-1], &t[j]) > 0; j-- {
			t[j-1], t[j] = t[j], t[j-1]
		}
	}
	b.entries, b.tmp = b.tmp, b.entries
}

// Commit writes the keys of b and st in one atomic Pebble batch: after any
// crash the store holds either both or neither. It assigns st.Seq = prev+1
// and returns the recorded state. On success b is reset and reusable.
//
// Commit does not sync (see "Crash semantics" in the package documentation):
// a returned Commit is visible to Get at once and durable after Flush or
// Close. On an error from Pebble b is reset too, and the caller must run
// recovery: its keys may or may not be in the store.
func (s *Store) Commit(b *Batch, st State) (State, error) {
	if b.s != s {
		return State{}, errors.New("statestore: commit: batch belongs to another store")
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.usable(); err != nil {
		return State{}, err
	}
	floor := s.floorGen()
	if len(b.entries) > 0 && b.minGen < floor {
		return State{}, fmt.Errorf("statestore: commit: %w: generation %d is below the floor %d", ErrExpiredGeneration, b.minGen, floor)
	}
	st.Seq = s.state.Seq + 1 // s.state is written under wmu, which we hold
	b.pb.Reset()
	b.encode()
	s.stateBuf = appendState(s.stateBuf[:0], st)
	_ = b.pb.Set(metaStateKey, s.stateBuf, nil)
	pb := b.pb
	err := s.fatal.await(func() error { return pb.Commit(s.writeOpts) })
	if err != nil {
		if errors.Is(err, ErrFatal) {
			// The batch may still be inside a parked Pebble goroutine.
			b.pb = s.db.NewBatch(pebble.WithMaxRetainedSizeBytes(batchRetainBytes))
			b.Reset()
			return State{}, err
		}
		b.Reset()
		return State{}, wrapErr(err, "statestore: commit seq %d", st.Seq)
	}
	s.mu.Lock()
	s.state.Seq, s.state.Generation = st.Seq, st.Generation
	s.state.Checkpoint = append(s.state.Checkpoint[:0], st.Checkpoint...)
	s.mu.Unlock()
	b.Reset()
	return st, nil
}
