package statestore

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Expire drops every bucket below oldestLive with one range deletion, and
// records oldestLive as the floor in the same atomic batch. It is
// idempotent: a floor at or below the recorded one is a no-op. The disk
// space comes back when Pebble compacts the deleted range (its delete-only
// compactions drop whole sstables without rewriting them); Compact forces it.
func (s *Store) Expire(oldestLive uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if oldestLive <= s.floorGen() {
		return nil
	}
	var floor [8]byte
	binary.BigEndian.PutUint64(floor[:], oldestLive)
	pb := s.db.NewBatch()
	_ = pb.DeleteRange(bucketsStart, genStart(oldestLive), nil)
	_ = pb.Set(metaFloorKey, floor[:], nil)
	if err := s.fatal.await(func() error { return pb.Commit(s.writeOpts) }); err != nil {
		return wrapErr(err, "statestore: expire below generation %d", oldestLive)
	}
	_ = pb.Close()
	s.mu.Lock()
	s.floor = oldestLive
	s.mu.Unlock()
	return nil
}

// Compact flushes and compacts the whole bucket keyspace, so that expired
// buckets and overwritten keys leave the disk. Pebble does this on its own
// over time; Compact is for tests, inspect and after large expiries. It can
// take as long as rewriting the store.
func (s *Store) Compact() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	return wrapErr(s.fatal.await(func() error {
		return s.db.Compact(context.Background(), bucketsStart, bucketsEnd, true)
	}), "statestore: compact")
}

// GenStats describes one stored bucket.
type GenStats struct {
	Gen uint64
	// Bytes is the estimated on-disk size of the bucket's sstables. Keys
	// still only in the memtable count 0.
	Bytes uint64
	// Keys is an estimate from sstable entry counts, proportional to Bytes;
	// it includes overwritten entries not yet compacted away.
	Keys uint64
}

// Generations lists the buckets that hold at least one live key, oldest
// first. It seeks once per bucket, not per key.
func (s *Store) Generations() (gens []GenStats, err error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	defer s.fatal.recover(&err)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: bucketsStart, UpperBound: bucketsEnd})
	if err != nil {
		return nil, fmt.Errorf("statestore: generations: %w", err)
	}
	for ok := it.First(); ok; {
		gen, _, valid := parseBucketKey(it.Key())
		if !valid {
			_ = it.Close()
			return nil, fmt.Errorf("statestore: generations: corrupt key %x", it.Key())
		}
		gens = append(gens, GenStats{Gen: gen})
		ok = it.SeekGE(genEnd(gen))
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("statestore: generations: %w", err)
	}
	for i := range gens {
		g := &gens[i]
		levels, err := s.db.SSTables(
			pebble.WithKeyRangeFilter(genStart(g.Gen), genEnd(g.Gen)),
			pebble.WithApproximateSpanBytes())
		if err != nil {
			return nil, fmt.Errorf("statestore: generations: %w", err)
		}
		for _, tables := range levels {
			for _, t := range tables {
				g.Bytes += t.ApproximateSpanBytes
				if t.Size > 0 {
					g.Keys += uint64(float64(t.TableStats.NumEntries) * float64(t.ApproximateSpanBytes) / float64(t.Size))
				}
			}
		}
	}
	return gens, nil
}

// DiskUsage returns the bytes the store occupies on disk: live and obsolete
// sstables, WAL and manifest. It returns 0 once the store is unusable.
func (s *Store) DiskUsage() (n uint64) {
	if s.usable() != nil {
		return 0
	}
	var err error
	defer s.fatal.recover(&err)
	return s.db.Metrics().DiskSpaceUsage()
}
