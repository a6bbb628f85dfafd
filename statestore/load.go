package statestore

import (
	"fmt"
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
		// The buffer the flusher is done with, if any: a run's worth.
		s.loadBuf, s.loadSpare = s.loadSpare[:0], nil
	}
	if need := len(s.loadBuf) + len(b.entries); need > cap(s.loadBuf) {
		// Doubling, up to a run's worth: append grows a large slice by a
		// quarter at a time, and those copies cost as much as the rest of
		// a restore's bookkeeping together (BenchmarkRestore profile).
		grown := make([]entry, len(s.loadBuf), max(need, min(2*cap(s.loadBuf), int(s.memKeys)+len(b.entries))))
		copy(grown, s.loadBuf)
		s.loadBuf = grown
	}
	s.loadBuf = append(s.loadBuf, b.entries...)
	s.mu.Lock()
	s.state.Seq, s.state.Generation = st.Seq, st.Generation
	s.state.Checkpoint = append(s.state.Checkpoint[:0], st.Checkpoint...)
	s.mu.Unlock()
	s.loading.Store(true)
	if uint64(len(s.loadBuf)) >= s.memKeys {
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
		s.loadSpare = prev.loaded // sorted into a copy, then left alone
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
	if len(s.loadBuf) > 0 {
		if err := s.handOverLoad(); err != nil {
			return err
		}
	}
	if err := s.awaitFlush(); err != nil {
		return err
	}
	s.loading.Store(false)
	s.loadSpare = nil
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

// sortLoaded sorts loaded entries by key and keeps the last Load of each.
func sortLoaded(es []entry) []memEntry {
	out := make([]memEntry, len(es))
	for i := range es {
		out[i] = memEntry{gen: es[i].gen, h: es[i].h, version: es[i].version}
	}
	sortMem(out) // stable: equal keys keep their order
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
