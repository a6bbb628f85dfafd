package statestore

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dedupstream/dedupstream/partition"
)

// ErrExpiredGeneration is returned by Commit when the batch writes into a
// generation that Expire already dropped: such a key would be invisible to
// the stage's window yet survive on disk until the next expiry.
var ErrExpiredGeneration = errors.New("statestore: generation already expired")

// entry is one Put. seq orders Puts of the same key: the last one wins.
type entry struct {
	gen     uint64
	h       partition.Hash
	version uint64
	seq     int
}

// Batch collects the keys of one commit cycle. It is reused across cycles
// and is not safe for concurrent use.
type Batch struct {
	s       *Store
	entries []entry
	minGen  uint64
}

// NewBatch returns an empty batch for Commit on s.
func (s *Store) NewBatch() *Batch {
	return &Batch{s: s, minGen: math.MaxUint64}
}

// Put records that h was emitted in generation gen. version is stored in
// version mode and ignored otherwise; of several Puts of the same (gen, h)
// the last one wins. Put does not allocate once the batch has grown.
func (b *Batch) Put(gen uint64, h partition.Hash, version uint64) {
	if !b.s.opts.VersionMode {
		version = 0
	}
	b.entries = append(b.entries, entry{gen: gen, h: h, version: version, seq: len(b.entries)})
	b.minGen = min(b.minGen, gen)
}

// Grow makes room for n more Puts, so that a caller that knows a cycle's
// key count puts them without growing the batch step by step (each step a
// copy of every entry put so far).
func (b *Batch) Grow(n int) {
	b.entries = slices.Grow(b.entries, n)
}

// Len returns the number of Puts since the last Reset or Commit.
func (b *Batch) Len() int { return len(b.entries) }

// Reset empties the batch, keeping its buffers (up to batchRetainKeys).
func (b *Batch) Reset() {
	if cap(b.entries) > batchRetainKeys {
		b.entries = nil
	}
	b.entries = b.entries[:0]
	b.minGen = math.MaxUint64
}

// batchRetainKeys is how many Puts a Batch keeps room for across Reset:
// enough for the largest commit cycle without re-growing each time.
const batchRetainKeys = 256 << 10

// Commit records the keys of b and st as one commit: after any crash the
// store holds either both or neither. It assigns st.Seq = prev+1 and returns
// the recorded state. On success b is reset and reusable.
//
// The keys go to the commit log (unless DisableWAL) and the in-memory index
// of recent keys; when that holds MemTableSize worth of keys it is handed to
// the flusher, which writes it as sorted runs. Commit does not sync (see
// "Crash semantics" in the package documentation): a returned Commit is
// visible to Get at once and durable after Flush or Close. On an error b is
// reset too, and the caller must run recovery.
func (s *Store) Commit(b *Batch, st State) (State, error) {
	if b.s != s {
		return State{}, errors.New("statestore: commit: batch belongs to another store")
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
	if err := s.finishLoad(); err != nil {
		return State{}, err
	}
	floor := s.floorGen()
	if len(b.entries) > 0 && b.minGen < floor {
		return State{}, fmt.Errorf("statestore: commit: %w: generation %d is below the floor %d", ErrExpiredGeneration, b.minGen, floor)
	}
	st.Seq = s.state.Seq + 1 // s.state is written under wmu, which we hold
	if s.log != nil {
		if err := s.log.appendCommit(st, b.entries); err != nil {
			return State{}, s.fatal.set(err)
		}
	}
	s.active.putAll(b.entries)
	s.mu.Lock()
	s.state.Seq, s.state.Generation = st.Seq, st.Generation
	s.state.Checkpoint = append(s.state.Checkpoint[:0], st.Checkpoint...)
	s.mu.Unlock()
	if uint64(s.active.len()) >= s.memKeys {
		if err := s.handOver(false); err != nil {
			return State{}, err
		}
	}
	return st, nil
}

var errReadOnly = errors.New("statestore: the store is open read-only")
