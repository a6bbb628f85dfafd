package statestore

import (
	"context"
	"fmt"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/sstable"
)

// A bulk load writes each full load buffer as runs while the load goes
// on: the flusher sorts the buffer (sortLoaded) and writes each of its
// generations as one leaf run (writeLoad), recorded with the state of the
// buffer's last Load in one synced batch, then kicks the merger like a
// flush. When the load ends (finishLoad) only the last buffer is left to
// write, so a restore ends shortly after its read: the size-tiered merges
// combine the loaded runs afterwards, on the merger.
//
// Before (sessions 6 to 10), full buffers were spilled to plain sorted
// files and one k-way merge of them wrote each generation as one run when
// the load ended: every key was written into an sstable once, but that
// merge and write of the whole load ran after the read (a 10M restore's
// tail: 0.6-0.8 s quiet, 0.8-1.2 s loaded; now 0.06-0.43 s, median 0.12),
// and a load of more than 16 buffers stopped to merge 16 spills on the
// worker. Writing each buffer as a run moves that work into the read,
// where the flusher was idle about 40 % of the time; the merge of the
// loaded runs (at 10M keys one merge of 8 of them: 1.0-1.6 s and 0.7-1.1 s
// of CPU on the merger, starting as the restore ends) is left to the
// size-tiered policy, as after flushes. In all the store does about 10 %
// more CPU per restored key: docs/benchmarks.md, "Restore overlap,
// session 11".
//
// A generation of at least loadSplitKeys keys in a buffer is written as
// two sstables, one per half of the hash space, on two goroutines: the run
// is the same (one id, one key range), its halves do not overlap.
//
// Crash semantics: each buffer's runs and the state of its last Load are
// recorded in one synced batch, a durable point of the load. A crash
// before it leaves the store at its state before the buffer's Loads (the
// last durable point, or the state before the load), and Open removes the
// unrecorded sstables with the rest of the ingest directory; the restore
// reads the output again from there.

// loadSplitKeys: a generation with at least this many keys in a buffer is
// written as two sstables (hash halves) on two goroutines.
const loadSplitKeys = 64 << 10

// loadSeg is the keys of one generation and hash half (the top bit of Hi)
// in a sorted buffer: es[off, off+n).
type loadSeg struct {
	gen  uint64
	half uint8
	off  int
	n    int
}

// segmentsOf cuts es, sorted by (gen, hash), into its segments.
func segmentsOf(es []memEntry) []loadSeg {
	var segs []loadSeg
	for i := 0; i < len(es); {
		gen := es[i].gen
		end := i + sort.Search(len(es)-i, func(k int) bool { return es[i+k].gen != gen })
		mid := i + sort.Search(end-i, func(k int) bool { return es[i+k].h.Hi>>63 == 1 })
		if mid > i {
			segs = append(segs, loadSeg{gen: gen, half: 0, off: i, n: mid - i})
		}
		if end > mid {
			segs = append(segs, loadSeg{gen: gen, half: 1, off: mid, n: end - mid})
		}
		i = end
	}
	return segs
}

// postLoad queues the write of a load buffer (job.loaded) as runs on the
// worker, followed by the tier merges a flush runs. It reports false once
// the store is fatal.
//
// The work runs under the profiler label piece=load-write, so that a CPU
// profile of a restore shows what it costs (go tool pprof -tags;
// job.restoreOutput labels the rest).
func (s *Store) postLoad(job *flushJob) bool {
	return s.w.post(func() {
		pprof.Do(context.Background(), pprof.Labels("piece", "load-write"), func(context.Context) {
			job.err = s.runJob(func() error { return s.writeLoad(job) })
		})
		close(job.done)
		if job.err != nil {
			return
		}
		s.noteRuns()
		s.mergeAfterWrite()
	})
}

// loadPart is one sstable of the runs writeLoad makes: the keys of gen in
// the given segments of the sorted buffer.
type loadPart struct {
	gen  uint64
	segs []loadSeg
	id   uint64 // the run's
	path string
	// runKeys sizes the filter: the run's keys in all its parts, so that
	// the parts' filters are of one size and OR into the run's.
	runKeys uint64
	// Set by the writer.
	written uint64
	bytes   uint64
	filter  *memFilter
}

// writeLoad writes job.loaded as one run per generation at or above
// job.floor, ingests the runs and records them with job.state and the
// floor in one synced batch. On the worker.
func (s *Store) writeLoad(job *flushJob) error {
	mem := sortLoaded(job.loaded)
	segs := segmentsOf(mem)
	fs := s.opts.FS
	var parts []*loadPart
	for i := 0; i < len(segs); {
		gen := segs[i].gen
		j, n := i, 0
		for ; j < len(segs) && segs[j].gen == gen; j++ {
			n += segs[j].n
		}
		if gen >= job.floor {
			id := s.allocRun() // the merger hands out ids too
			if n >= loadSplitKeys {
				for _, sg := range segs[i:j] {
					parts = append(parts, &loadPart{gen: gen, segs: []loadSeg{sg}, id: id, runKeys: uint64(n)})
				}
			} else {
				parts = append(parts, &loadPart{gen: gen, segs: segs[i:j], id: id, runKeys: uint64(n)})
			}
		}
		i = j
	}
	for i, p := range parts {
		p.path = fs.PathJoin(s.dir, ingestDir, fmt.Sprintf("%06d-%03d.sst", p.id, i))
	}
	wo := s.runWriterOptions()
	// Two goroutines (this one and a helper) take parts in turn.
	var (
		nextPart atomic.Int64
		errMu    sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	work := func() {
		for {
			i := int(nextPart.Add(1) - 1)
			if i >= len(parts) {
				return
			}
			if err := s.writeLoadPart(parts[i], mem, wo); err != nil {
				errMu.Lock()
				firstErr = cmpErr(firstErr, err)
				errMu.Unlock()
				return
			}
		}
	}
	if len(parts) > 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	var paths []string
	var written []run
	for i, p := range parts {
		paths = append(paths, p.path)
		if i > 0 && parts[i-1].id == p.id {
			// The second half of the run before.
			continue
		}
		r := run{gen: p.gen, id: p.id, lo: p.id, hi: p.id, filter: p.filter}
		for _, q := range parts[i:] {
			if q.id != p.id {
				break
			}
			r.keys += q.written
			r.bytes += q.bytes
			if q != p {
				err := orFilters(p.filter.f, q.filter.f)
				q.filter.unref() // its bits are in p's now
				if err != nil {
					return fmt.Errorf("loaded run %d: %w", p.id, err)
				}
			}
		}
		// The run's filter, once its parts' are combined, in an sstable of
		// its own that sorts after them (packs.go).
		fp := fs.PathJoin(s.dir, ingestDir, fmt.Sprintf("%06d-flt.sst", p.id))
		if err := s.writeFilterTable(fp, p.gen, p.id, p.filter.f); err != nil {
			return fmt.Errorf("write the filter of loaded run %d: %w", p.id, err)
		}
		var runPaths []string
		for _, q := range parts[i:] {
			if q.id != p.id {
				break
			}
			runPaths = append(runPaths, q.path)
		}
		r.blocks = s.runBlocksOrNil(p.gen, p.id, runPaths)
		paths = append(paths, fp)
		written = append(written, r)
	}
	if len(paths) > 0 {
		if err := s.db.Ingest(context.Background(), paths); err != nil {
			return fmt.Errorf("ingest loaded runs: %w", err)
		}
	}
	if err := s.publishRuns(job, written, "record loaded runs", nil); err != nil {
		return err
	}
	s.dropGetReader()
	for _, p := range paths {
		_ = fs.Remove(p) // Pebble holds a link of its own
	}
	return nil
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// writeLoadPart writes part p, its segments of mem (sorted, one entry per
// key), into one sstable of packs (packs.go); the filter it builds
// (p.filter) is sized for the whole run (p.runKeys), so that writeLoad can
// combine the filters of a run's two parts.
func (s *Store) writeLoadPart(p *loadPart, mem []memEntry, wo sstable.WriterOptions) error {
	out, err := s.createTable(p.path)
	if err != nil {
		return fmt.Errorf("create loaded run %d: %w", p.id, err)
	}
	w := sstable.NewWriter(out, wo)
	closed := false
	defer func() {
		if !closed {
			_ = w.Close()
		}
	}()
	pw := newPackWriter(w, p.gen, p.id, s.opts.packKeysOrDefault(), s.opts.VersionMode, p.runKeys, runFilterBits(p.runKeys, s.memKeys))
	for _, sg := range p.segs {
		for _, e := range mem[sg.off : sg.off+sg.n] {
			if err := pw.add(e.h, e.version); err != nil {
				return fmt.Errorf("write loaded run %d: %w", p.id, err)
			}
		}
		p.written += uint64(sg.n)
	}
	if err := pw.flush(); err != nil {
		return fmt.Errorf("write loaded run %d: %w", p.id, err)
	}
	p.filter = pw.finishFilter()
	closed = true
	if err := w.Close(); err != nil {
		return fmt.Errorf("write loaded run %d: %w", p.id, err)
	}
	if fi, err := s.opts.FS.Stat(p.path); err == nil {
		p.bytes = uint64(fi.Size())
	}
	return nil
}
