package statestore

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/dedupstream/dedupstream/partition"
)

// Reader confirms many keys through one Pebble iterator and one consistent
// view of the store. Opening an iterator is most of the cost of a single
// Lookup (BenchmarkLookups: a Reader confirms a batch of keys about twice as
// fast), so the stage opens one Reader per batch. A Reader sees the store as
// it was when opened; it is not safe for concurrent use, and it must be
// closed. The zero value is ready for OpenReader.
type Reader struct {
	s  *Store
	r  *reader
	it *pebble.Iterator
}

// OpenReader opens rd on the store's current state. It does not allocate.
func (s *Store) OpenReader(rd *Reader) (err error) {
	if err := s.usable(); err != nil {
		return err
	}
	defer s.fatal.recover(&err)
	r := s.readers.Get().(*reader)
	r.opts.PointKeyFilters = r.filters[:0]
	it, err := s.db.NewIter(&r.opts)
	if err != nil {
		s.readers.Put(r)
		return fmt.Errorf("statestore: get: %w", err)
	}
	*rd = Reader{s: s, r: r, it: it}
	return nil
}

// Lookup probes the generations in the given order (newest first, as the
// Bloom front names them) and returns the first one holding h, with its
// version in version mode.
func (rd *Reader) Lookup(h partition.Hash, gens []uint64) (gen, version uint64, found bool, err error) {
	if err := rd.s.usable(); err != nil {
		return 0, 0, false, err
	}
	defer rd.s.fatal.recover(&err)
	for i, g := range gens {
		gen = g
		if i == 0 {
			putBucketKey(rd.r.key[:], g, h)
		} else {
			binary.BigEndian.PutUint64(rd.r.key[1:genPrefixLen], g)
		}
		// The comparer's Split is the whole key, so a prefix seek is an
		// exact-match probe that can use the sstable Bloom filters.
		if rd.it.SeekPrefixGE(rd.r.key[:]) {
			v, err := rd.it.ValueAndErr()
			if err == nil {
				version, err = decodeVersion(v)
			}
			if err != nil {
				return 0, 0, false, fmt.Errorf("statestore: get generation %d: %w", gen, err)
			}
			return gen, version, true, nil
		}
		if err := rd.it.Error(); err != nil {
			return 0, 0, false, fmt.Errorf("statestore: get generation %d: %w", gen, err)
		}
	}
	return 0, 0, false, nil
}

// IsOpen reports whether rd is open.
func (rd *Reader) IsOpen() bool { return rd.it != nil }

// Close releases the iterator. Closing a closed or never opened Reader does
// nothing.
func (rd *Reader) Close() (err error) {
	if rd.it == nil {
		return nil
	}
	defer rd.s.fatal.recover(&err)
	err = rd.it.Close()
	rd.s.readers.Put(rd.r)
	*rd = Reader{}
	if err != nil {
		return fmt.Errorf("statestore: close reader: %w", err)
	}
	return nil
}
