package statestore

import (
	"context"
	"slices"
)

// Expire drops every bucket below oldestLive: at once for reads, and on
// disk with one range deletion recorded in the same Pebble batch as the
// floor, the state and the runs, which the flusher writes right away (the
// keys in memory are handed over with it). It is idempotent: a floor at or
// below the recorded one is a no-op. The disk space comes back when Pebble
// compacts the deleted range (delete-only compactions drop whole sstables
// without rewriting them); Compact forces it.
func (s *Store) Expire(oldestLive uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if oldestLive <= s.floorGen() {
		return nil
	}
	if s.opts.ReadOnly {
		return errReadOnly
	}
	if err := s.finishLoad(); err != nil {
		return err
	}
	if s.log != nil {
		if err := s.log.appendExpire(oldestLive); err != nil {
			return s.fatal.set(err)
		}
	}
	s.mu.Lock()
	s.floor = oldestLive
	s.mu.Unlock()
	return wrapErr(s.handOver(false), "statestore: expire below generation %d", oldestLive)
}

// Compact writes the keys held in memory as runs, then compacts the whole
// bucket keyspace, so that expired buckets and merged runs leave the disk.
// Pebble does this on its own over time; Compact is for tests, inspect and
// after large expiries.
func (s *Store) Compact() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if !s.opts.ReadOnly {
		if err := s.finishLoad(); err != nil {
			return err
		}
		if err := s.handOver(false); err != nil {
			return err
		}
		if err := s.awaitFlush(); err != nil {
			return err
		}
	}
	return wrapErr(s.w.do(func() error {
		return s.db.Compact(context.Background(), bucketsStart, bucketsEnd, true)
	}), "statestore: compact")
}

// GenStats describes one stored bucket.
type GenStats struct {
	Gen uint64
	// Bytes is the on-disk size of the bucket's runs. Keys still only in
	// memory count 0.
	Bytes uint64
	// Keys counts the keys of the runs and in memory; a key stored in two
	// runs (written again after a crash, or a newer version) counts twice
	// until the runs are merged.
	Keys uint64
	// Runs is the number of sorted runs a read of the bucket may probe.
	Runs int
}

// Generations lists the buckets that hold at least one live key, oldest
// first.
func (s *Store) Generations() (gens []GenStats, err error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := s.endLoad(); err != nil {
		return nil, err
	}
	floor := s.floorGen()
	s.viewMu.RLock()
	// Held to the end: the flusher reuses an index once it is unpublished.
	defer s.viewMu.RUnlock()
	active, imm, rs := s.active, s.imm, s.runs.Load()
	ids := imm.generations(active.generations(nil))
	for g := range rs.gens {
		ids = append(ids, g)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	for _, g := range ids {
		if g < floor {
			continue
		}
		st := GenStats{Gen: g, Keys: active.keysOf(g) + imm.keysOf(g)}
		for _, r := range rs.of(g) {
			st.Bytes += r.bytes
			st.Keys += r.keys
			st.Runs++
		}
		gens = append(gens, st)
	}
	return gens, nil
}

// DiskUsage returns the bytes the store occupies on disk: live and obsolete
// sstables, Pebble's WAL and manifest, and the commit logs. It returns 0
// once the store is unusable.
func (s *Store) DiskUsage() (n uint64) {
	if s.usable() != nil {
		return 0
	}
	_ = s.read(func() error {
		n = s.db.Metrics().DiskSpaceUsage()
		return nil
	})
	return n + s.logBytes() + uint64(s.rec.Stats().PoolBytes)
}

// logBytes is the size of the commit logs on disk (a log removed while it
// is listed counts 0).
func (s *Store) logBytes() uint64 {
	fs := s.opts.FS
	nums, err := listLogs(fs, s.dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, num := range nums {
		if fi, err := fs.Stat(fs.PathJoin(s.dir, logName(num))); err == nil {
			n += uint64(fi.Size())
		}
	}
	return n
}
