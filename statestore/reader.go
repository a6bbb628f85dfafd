package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/dedupstream/dedupstream/partition"
)

// Reader confirms many keys through one consistent view of the store: the
// in-memory indexes and the runs as they were when it was opened or last
// refreshed, plus the keys committed since to the indexes it holds. It
// keeps one Pebble iterator per run, bounded to that run's key range, so
// that a probe of a run reuses the sstable iterator, index and filter it
// opened before instead of switching files inside one iterator over the
// whole store (BenchmarkLayout, confirm-cpu-ns: see "Reads" in the package
// documentation).
//
// A Reader is meant to live long: the stage keeps one across batches and
// calls Refresh at the start of each, which picks up new in-memory indexes
// and opens iterators only for runs that are new since the last view. It is
// not safe for concurrent use, and it must be closed: until then it pins
// the sstables of the runs it saw, even if merges replaced them. The zero
// value is ready for OpenReader.
type Reader struct {
	s      *Store
	active *memIndex
	imm    *memIndex
	runs   *runSet
	its    []*runIter            // one per run of runs
	byGen  map[uint64][]*runIter // per generation, in runs.of's order (newest first)
	spare  []*runIter            // scratch for Refresh
	key    [bucketKeyLen]byte
	br     blockRead // reads of run blocks (blocks.go)
	// The arguments and results of probe, which runs through Store.read.
	probeGen  uint64
	probeHash partition.Hash
	found     bool
	version   uint64
}

// runIter is the iterator of one run.
type runIter struct {
	gen, id uint64
	filter  *memFilter // the run's filter in memory, or nil
	blocks  *runBlocks // the run's blocks read here, or nil (Pebble reads them)
	it      *pebble.Iterator
	lo      [runPrefixLen]byte
	hi      [filterKeyPrefixLen]byte // the packs' bound: the filter follows
	opts    pebble.IterOptions
	// Pebble appends one filter to PointKeyFilters for every sstable it
	// opens; with room for it here that append does not allocate.
	filters [1]pebble.BlockPropertyFilter
}

// OpenReader opens rd on the store's current state; on a Reader that is
// already open it is Refresh. It allocates only for runs it has no iterator
// for yet.
func (s *Store) OpenReader(rd *Reader) (err error) {
	if rd.s != nil && rd.s != s {
		return errors.New("statestore: open reader: the reader is open on another store")
	}
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.endLoad(); err != nil {
		return err
	}
	rd.s = s
	return rd.refresh()
}

// Refresh moves rd to the store's current state: keys committed and runs
// written since it was opened become visible. Iterators of runs that are
// gone are closed; runs that are new get one.
func (rd *Reader) Refresh() (err error) {
	if rd.s == nil {
		return errors.New("statestore: refresh of a reader that is not open")
	}
	return rd.s.OpenReader(rd)
}

// refresh captures the indexes and the runs under the view lock and opens
// the iterators of new runs there too: the flusher deletes a merged run's
// keys only after publishing the run set without it, under the write lock,
// so every run captured here is still readable by an iterator opened here.
//
// An iterator holds the Pebble version it was opened on, and with it every
// table live then: a run that has left the set since (merged, expired)
// keeps its files on disk, and out of the recycler (recycle.go), for as
// long as an older run's iterator lives, up to its generation's expiry.
// So once a run has left, the iterators kept are reopened on the current
// version (a few dozen per merge or expiry, not per batch).
func (rd *Reader) refresh() error {
	s := rd.s
	s.viewMu.RLock()
	defer s.viewMu.RUnlock()
	active, imm, runs := s.active, s.imm, s.runs.Load()
	rd.hold(active, imm)
	if runs == rd.runs {
		return nil
	}
	// Keep the iterators of runs still live, in the new set's order; close
	// the rest.
	rd.spare = rd.spare[:0]
	var errs []error
	gone := false
	for _, ri := range rd.its {
		if runs.has(ri.gen, ri.id) {
			rd.spare = append(rd.spare, ri)
		} else {
			gone = true
			ri.filter.unref()
			ri.blocks.unref()
			if err := s.read(ri.it.Close); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// open opens ri's iterator on the current version; on an error it
	// lets go of ri's holds (the caller then leaves ri out).
	open := func(ri *runIter) error {
		ri.opts.PointKeyFilters = ri.filters[:0]
		err := s.read(func() (err error) {
			ri.it, err = s.db.NewIter(&ri.opts)
			return err
		})
		if err != nil {
			ri.filter.unref()
			ri.blocks.unref()
		}
		return err
	}
	rd.its = rd.its[:0]
	for _, runs := range runs.gens {
		for _, r := range runs {
			var ri *runIter
			for _, old := range rd.spare {
				if old.gen == r.gen && old.id == r.id {
					ri = old
					break
				}
			}
			if ri != nil && gone {
				if err := s.read(ri.it.Close); err != nil {
					errs = append(errs, err)
				}
				if err := open(ri); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			if ri == nil {
				ri = &runIter{gen: r.gen, id: r.id}
				if r.filter != nil && r.filter.acquire() {
					ri.filter = r.filter
				}
				if r.blocks != nil && r.blocks.acquire() {
					ri.blocks = r.blocks
				}
				putRunPrefix(ri.lo[:], r.gen, r.id)
				putFilterPrefix(ri.hi[:], r.gen, r.id)
				// The run's filter is in memory (runs carry none in
				// Pebble): a lookup seeks only runs that may hold its key.
				ri.opts = pebble.IterOptions{LowerBound: ri.lo[:], UpperBound: ri.hi[:]}
				if err := open(ri); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			rd.its = append(rd.its, ri)
		}
	}
	rd.runs = runs
	if rd.byGen == nil {
		rd.byGen = map[uint64][]*runIter{}
	}
	for g, l := range rd.byGen {
		if len(runs.of(g)) == 0 {
			delete(rd.byGen, g)
		} else {
			rd.byGen[g] = l[:0]
		}
	}
	for g, gr := range runs.gens {
		l := rd.byGen[g]
		for _, r := range gr {
			for _, ri := range rd.its {
				if ri.id == r.id && ri.gen == g {
					l = append(l, ri)
					break
				}
			}
		}
		rd.byGen[g] = l
	}
	if err := errors.Join(errs...); err != nil {
		return s.readErr(err, "statestore: open reader")
	}
	return nil
}

// hold makes rd hold active and imm, releasing the indexes it held.
func (rd *Reader) hold(active, imm *memIndex) {
	if rd.active != active {
		active.readers.Add(1)
		rd.s.releaseMem(rd.active)
		rd.active = active
	}
	if rd.imm != imm {
		if imm != nil {
			imm.readers.Add(1)
		}
		rd.s.releaseMem(rd.imm)
		rd.imm = imm
	}
}

// Lookup probes the generations in the given order (newest first, as the
// Bloom front names them) and returns the first one holding h, with its
// version in version mode. Within a generation the keys committed since
// the last run are answered from memory; then the runs are probed newest
// first: the run's filter in memory answers most misses, and a run that
// may hold h is sought through its own iterator, one SeekGE to the pack
// that can hold h and a binary search in it (packs.go).
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
		rd.probeGen, rd.probeHash = g, h
		err = rd.s.read(rd.probe)
		if err != nil {
			return 0, 0, false, rd.s.readErr(err, "statestore: get generation %d", g)
		}
		if rd.found {
			return g, rd.version, true, nil
		}
	}
	return 0, 0, false, nil
}

// Prefetch asks the CPU, without waiting, for the memory a Lookup of h in
// gens reads first and which a large window keeps out of the caches: h's
// slots in the memory indexes and its block in the filter of every run of
// gens. The stage calls it for every key of a chunk that needs a lookup
// before it decides the first, so that the misses of the chunk's lookups
// overlap instead of each lookup waiting for its own in turn.
func (rd *Reader) Prefetch(h partition.Hash, gens []uint64) {
	for _, g := range gens {
		rd.active.prefetch(g, h)
		rd.imm.prefetch(g, h)
		for _, ri := range rd.byGen[g] {
			if ri.filter != nil {
				ri.filter.prefetch(h)
			}
		}
	}
}

// probe probes the runs of rd.probeGen, newest first, for rd.probeHash,
// setting rd.found and rd.version: arguments and results live in rd, so
// that handing the method value to Store.read captures nothing else (in
// production builds read calls it in place and nothing allocates).
func (rd *Reader) probe() error {
	g, h := rd.probeGen, rd.probeHash
	rd.found, rd.version = false, 0
	if n := len(rd.runs.of(g)); len(rd.byGen[g]) != n {
		return fmt.Errorf("no iterator for %d of the %d runs", n-len(rd.byGen[g]), n)
	}
	runs := rd.byGen[g]
	if len(runs) > 1 {
		// In a large store each run's filter block is a cache miss (68
		// MiB of filters at 100M keys), and the loop below tests one
		// filter after the other until a run holds h: ask for all the
		// blocks first, so that their misses overlap.
		for _, ri := range runs {
			if ri.filter != nil {
				ri.filter.prefetch(h)
			}
		}
	}
	for i, ri := range runs {
		if i == 0 {
			putRunKey(rd.key[:], g, ri.id, h)
		} else {
			binary.BigEndian.PutUint64(rd.key[genPrefixLen:runPrefixLen], ri.id)
		}
		if ri.filter != nil && !ri.filter.mayContain(rd.key[:]) {
			continue
		}
		// The only pack of the run that can hold h is the first whose
		// last hash is h or above: one block read and a seek in it
		// (blocks.go), or one Pebble seek; then a binary search.
		var v uint64
		found, ok := false, false
		var err error
		if ri.blocks != nil {
			v, found, ok, err = rd.s.lookupBlocks(&rd.br, ri.blocks, rd.key[:], h)
		}
		if !ok && err == nil {
			v, found, err = lookupPack(ri.it, rd.key[:], h)
		}
		if err != nil {
			return err
		}
		if found {
			rd.found, rd.version = true, v
			return nil
		}
	}
	return nil
}

// IsOpen reports whether rd is open.
func (rd *Reader) IsOpen() bool { return rd.s != nil }

// Close releases the iterators and the indexes. Closing a closed or never
// opened Reader does nothing.
func (rd *Reader) Close() (err error) {
	if rd.s == nil {
		return nil
	}
	s := rd.s
	s.releaseMem(rd.active)
	s.releaseMem(rd.imm)
	if ferr := s.fatal.get(); ferr != nil {
		// Pebble's goroutines may be parked holding its locks: leave the
		// iterators to the process's exit.
		*rd = Reader{}
		return ferr
	}
	var errs []error
	for _, ri := range rd.its {
		ri.filter.unref()
		ri.blocks.unref()
		if err := s.read(ri.it.Close); err != nil {
			errs = append(errs, err)
		}
	}
	its, spare := rd.its[:0], rd.spare[:0]
	clear(rd.byGen)
	*rd = Reader{its: its, spare: spare, byGen: rd.byGen, br: blockRead{buf: rd.br.buf}}
	if err := errors.Join(errs...); err != nil {
		return s.readErr(err, "statestore: close reader")
	}
	return nil
}
