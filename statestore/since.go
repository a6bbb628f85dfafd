package statestore

import "github.com/dedupstream/dedupstream/partition"

// Mark is a point in the store's history that ScanSince can start from:
// the commit sequence, and the id the next run gets. Run ids only grow, so
// every key committed after Seq is, from then on, either held in memory
// (or replayed into it from the commit log after a crash) or in a run
// holding a leaf (a run a flush or bulk load wrote) whose id is NextRun or
// more. Mark also moves the merge barrier, so such runs hold no keys of
// older leaves. A Bloom front saved with a Mark thus catches up after a
// crash with the work done since it was saved, whatever the store's size.
type Mark struct {
	Seq     uint64
	NextRun uint64
}

// Mark returns the store's current mark. Taken between commits (as the
// stage does when it saves its Bloom front), Seq is State().Seq.
func (s *Store) Mark() Mark {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	seq := s.state.Seq
	s.mu.Unlock()
	next := s.runs.Load().next
	s.raiseBarrier(next)
	return Mark{Seq: seq, NextRun: next}
}

// raiseBarrier moves the merge barrier up to next (never down). From then
// on the flusher merges runs made before next only with each other, and
// runs made since only with each other (mergePolicy.pickMerge), so a
// ScanSince from this Mark reads the runs made since and none of the keys
// before. Open starts the barrier at the registry's next id, which is at
// least the NextRun of any Mark saved before the restart.
func (s *Store) raiseBarrier(next uint64) {
	for {
		b := s.barrier.Load()
		if next <= b || s.barrier.CompareAndSwap(b, next) {
			return
		}
	}
}

// ScanSince calls fn for every key the store holds in a live generation
// (at or above the expiry floor) that may have been committed after m: the
// keys held in memory and those of the runs holding a leaf made since m
// (a merge made since of older runs only is skipped). It visits a superset
// of the keys committed after m (a key may come twice, and keys committed
// before m that were still in memory come too), in no particular order,
// and returns how many it visited. Its cost is the keys in memory (at most
// two indexes' worth) plus the keys written since m, not the store's size:
// the merge barrier keeps older keys out of the runs made since the last
// Mark. From an older Mark, runs merged across it are read whole.
//
// m must be a Mark of this store taken since it last lost commits: after
// a crash that lost commits (a machine crash without Flush) run ids can
// be handed out again. The stage guarantees this by using a saved Mark
// only when the store's Seq has not gone below it, and only once.
func (s *Store) ScanSince(m Mark, fn func(gen uint64, h partition.Hash) error) (keys int, err error) {
	if err := s.usable(); err != nil {
		return 0, err
	}
	if err := s.endLoad(); err != nil {
		return 0, err
	}
	floor := s.floorGen()
	s.viewMu.RLock()
	active, imm, rs := s.active, s.imm, s.runs.Load()
	var (
		srcs []*runCursor
		gens []uint64 // of srcs
	)
	defer func() {
		for _, c := range srcs {
			if cerr := c.close(); err == nil && cerr != nil {
				err = s.readErr(cerr, "statestore: scan since seq %d", m.Seq)
			}
		}
	}()
	for gen, runs := range rs.gens {
		if gen < floor {
			continue
		}
		for _, r := range runs {
			if r.hi < m.NextRun {
				// Every leaf it holds was written before the Mark: so
				// were its keys, even if the run itself was merged since.
				continue
			}
			c, err := s.openRunCursor(r, s.read)
			if err != nil {
				s.viewMu.RUnlock()
				return keys, s.readErr(err, "statestore: scan since seq %d: run %d of generation %d", m.Seq, r.id, gen)
			}
			srcs, gens = append(srcs, c), append(gens, gen)
		}
	}
	s.viewMu.RUnlock()
	// The indexes: imm is immutable once handed over; active is only
	// changed by Commit, which the caller does not run meanwhile.
	for _, mi := range []*memIndex{imm, active} {
		if mi == nil {
			continue
		}
		mi.mu.RLock()
		err = mi.each(func(gen uint64, h partition.Hash, _ uint64) error {
			if gen < floor {
				return nil
			}
			keys++
			return fn(gen, h)
		})
		mi.mu.RUnlock()
		if err != nil {
			return keys, err
		}
	}
	for i, c := range srcs {
		for c.ok {
			if err := fn(gens[i], c.h); err != nil {
				return keys, err
			}
			keys++
			if err := c.next(); err != nil {
				return keys, s.readErr(err, "statestore: scan since seq %d: generation %d", m.Seq, gens[i])
			}
		}
	}
	return keys, nil
}
