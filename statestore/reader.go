package statestore

import (
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"

	"github.com/dedupstream/dedupstream/partition"
)

// Reader confirms many keys through one Pebble iterator and one consistent
// view of the store. Opening an iterator is most of the cost of a single
// Lookup (BenchmarkLookups: a Reader confirms a batch of keys about twice as
// fast), so the stage opens one Reader per batch. A Reader sees the runs as
// they were when opened and the keys committed since; it is not safe for
// concurrent use, and it must be closed. The zero value is ready for
// OpenReader.
type Reader struct {
	s      *Store
	r      *reader
	it     *pebble.Iterator
	active *memIndex
	imm    *memIndex
	runs   *runSet
}

// OpenReader opens rd on the store's current state. It does not allocate.
func (s *Store) OpenReader(rd *Reader) (err error) {
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.endLoad(); err != nil {
		return err
	}
	r := s.readers.Get().(*reader)
	r.opts.PointKeyFilters = r.filters[:0]
	// Under the read lock: the runs captured and the iterator's view of
	// Pebble agree (see Store.viewMu).
	s.viewMu.RLock()
	active, imm, runs := s.active, s.imm, s.runs.Load()
	var it *pebble.Iterator
	err = s.read(func() (err error) {
		it, err = s.db.NewIter(&r.opts)
		return err
	})
	s.viewMu.RUnlock()
	if err != nil {
		s.readers.Put(r)
		return s.readErr(err, "statestore: get")
	}
	*rd = Reader{s: s, r: r, it: it, active: active, imm: imm, runs: runs}
	return nil
}

// Lookup probes the generations in the given order (newest first, as the
// Bloom front names them) and returns the first one holding h, with its
// version in version mode. Within a generation the keys committed since
// the last run are answered from memory; then the runs are probed newest
// first, each with one prefix seek that its sstable's Bloom filter answers
// for most misses.
func (rd *Reader) Lookup(h partition.Hash, gens []uint64) (gen, version uint64, found bool, err error) {
	if err := rd.s.usable(); err != nil {
		return 0, 0, false, err
	}
	floor := rd.s.floorGen()
	for _, g := range gens {
		if g < floor {
			continue
		}
		if v, ok := rd.active.get(g, h); ok {
			return g, v, true, nil
		}
		if v, ok := rd.imm.get(g, h); ok {
			return g, v, true, nil
		}
		if len(rd.runs.of(g)) == 0 {
			continue
		}
		err = rd.s.read(func() (err error) {
			version, found, err = rd.probeRuns(g, h)
			return err
		})
		if err != nil {
			return 0, 0, false, rd.s.readErr(err, "statestore: get generation %d", g)
		}
		if found {
			return g, version, true, nil
		}
	}
	return 0, 0, false, nil
}

// probeRuns probes the runs of generation g, newest first, for h.
func (rd *Reader) probeRuns(g uint64, h partition.Hash) (version uint64, found bool, err error) {
	for i, r := range rd.runs.of(g) {
		if i == 0 {
			putRunKey(rd.r.key[:], g, r.id, h)
		} else {
			binary.BigEndian.PutUint64(rd.r.key[genPrefixLen:runPrefixLen], r.id)
		}
		// The comparer's Split is the whole key, so a prefix seek is an
		// exact-match probe that can use the sstable Bloom filters.
		if rd.it.SeekPrefixGE(rd.r.key[:]) {
			v, err := rd.it.ValueAndErr()
			if err == nil {
				version, err = decodeVersion(v)
			}
			return version, err == nil, err
		}
		if err := rd.it.Error(); err != nil {
			return 0, false, err
		}
	}
	return 0, false, nil
}

// IsOpen reports whether rd is open.
func (rd *Reader) IsOpen() bool { return rd.it != nil }

// Close releases the iterator. Closing a closed or never opened Reader does
// nothing.
func (rd *Reader) Close() (err error) {
	if rd.it == nil {
		return nil
	}
	if ferr := rd.s.fatal.get(); ferr != nil {
		// Pebble's goroutines may be parked holding its locks: leave the
		// iterator to the process's exit.
		*rd = Reader{}
		return ferr
	}
	it := rd.it
	err = rd.s.read(it.Close)
	rd.s.readers.Put(rd.r)
	s := rd.s
	*rd = Reader{}
	if err != nil {
		return s.readErr(err, "statestore: close reader")
	}
	return nil
}
