package statestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// A bulk load writes each key into an sstable once. Each full load buffer
// is sorted by the flusher (sortLoaded) and spilled to a plain file in the
// ingest directory (spillLoad): no Pebble write, no state recorded, no
// merge. When the load ends (finishLoad), or when loadMaxSpills files are
// waiting, one k-way merge of the spills and the last buffer writes every
// generation's keys as one run (writeLoad), with the state of the last
// Load, in one synced batch. Before, every full buffer became a run and
// the size-tiered merges rewrote the loaded runs: 10M keys were written
// about 1.8 times and read back once through Pebble iterators (the
// flusher's 11 s of a 10M restore's 20 s of CPU; BenchmarkRestore).
//
// A generation of at least loadSplitKeys keys is written as two sstables,
// one per half of the hash space, on two goroutines: the run is the same
// (one id, one key range), its halves do not overlap.
//
// Crash semantics: the spills are claimed by nothing. A crash before the
// final batch leaves the store at its state before the load (or at the
// load's last durable point), and Open removes the spills with the rest of
// the ingest directory; the restore reads the output again from there.

const (
	// loadMaxSpills bounds the spill files of one load (and so the merge's
	// fan-in and the disk they take): the handover that would make one more
	// writes them, with its buffer, as runs instead, a durable point of the
	// load. With 64 MiB indexes that is every 17M keys.
	loadMaxSpills = 16
	// loadSplitKeys: a generation with at least this many loaded keys is
	// written as two sstables (hash halves) on two goroutines.
	loadSplitKeys = 64 << 10
	// spillReadRecs is how many records a merge source reads at a time.
	spillReadRecs = 4096
	// spillBufBytes is the write buffer of a spill.
	spillBufBytes = 1 << 20
)

// loadSpills is the spill state of a load: the files written and the
// handovers posted since the last durable point.
type loadSpills struct {
	files []spillFile // flusher only
	seq   uint64      // names the next spill (flusher only)
	buf   []byte      // spill write buffer (flusher only)
	// posted counts the spill jobs posted since the last final one (under
	// wmu).
	posted int
	// capped counts the final jobs posted at loadMaxSpills (under wmu).
	capped int
}

// spillFile is one spilled load buffer: records of the hash (16 bytes,
// Hi then Lo, little-endian) and, in version mode, the version (8 bytes),
// sorted by (generation, hash), one per key (its last Load). The
// generations are in segs, not in the records.
type spillFile struct {
	path string
	segs []spillSeg
}

// spillSeg is the records of one generation and hash half (the top bit of
// Hi) in a spill or a sorted buffer: records [off, off+n).
type spillSeg struct {
	gen  uint64
	half uint8
	off  int64
	n    int64
}

// segmentsOf cuts es, sorted by (gen, hash), into its segments.
func segmentsOf(es []memEntry) []spillSeg {
	var segs []spillSeg
	for i := 0; i < len(es); {
		gen := es[i].gen
		end := i + sort.Search(len(es)-i, func(k int) bool { return es[i+k].gen != gen })
		mid := i + sort.Search(end-i, func(k int) bool { return es[i+k].h.Hi>>63 == 1 })
		if mid > i {
			segs = append(segs, spillSeg{gen: gen, half: 0, off: int64(i), n: int64(mid - i)})
		}
		if end > mid {
			segs = append(segs, spillSeg{gen: gen, half: 1, off: int64(mid), n: int64(end - mid)})
		}
		i = end
	}
	return segs
}

func findSeg(segs []spillSeg, gen uint64, half uint8) (spillSeg, bool) {
	i := sort.Search(len(segs), func(i int) bool {
		return segs[i].gen > gen || (segs[i].gen == gen && segs[i].half >= half)
	})
	if i < len(segs) && segs[i].gen == gen && segs[i].half == half {
		return segs[i], true
	}
	return spillSeg{}, false
}

// spillRecLen is the length of a spill record.
func (s *Store) spillRecLen() int {
	if s.opts.VersionMode {
		return 24
	}
	return 16
}

// postLoad queues a load job on the worker: a spill, or (final) the merge
// of the spills and job.loaded into runs, followed by the tier merges a
// flush runs. It reports false once the store is fatal.
//
// The work runs under the profiler label piece=load-spill or
// piece=load-write, so that a CPU profile of a restore shows what each
// piece costs (go tool pprof -tags; job.restoreOutput labels the rest).
func (s *Store) postLoad(job *flushJob, final bool) bool {
	return s.w.post(func() {
		if !final {
			pprof.Do(context.Background(), pprof.Labels("piece", "load-spill"), func(context.Context) {
				job.err = s.runJob(func() error { return s.spillLoad(job.loaded) })
			})
			close(job.done)
			return
		}
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

// spillLoad sorts lb and writes it as the next spill file. On the worker.
func (s *Store) spillLoad(lb *loadBuffer) error {
	es := sortLoaded(lb)
	fs := s.opts.FS
	path := fs.PathJoin(s.dir, ingestDir, fmt.Sprintf("load-%06d.spill", s.spill.seq))
	s.spill.seq++
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create load spill: %w", err)
	}
	if s.spill.buf == nil {
		s.spill.buf = make([]byte, 0, spillBufBytes)
	}
	buf, vm := s.spill.buf[:0], s.opts.VersionMode
	for i := range es {
		e := &es[i]
		buf = binary.LittleEndian.AppendUint64(buf, e.h.Hi)
		buf = binary.LittleEndian.AppendUint64(buf, e.h.Lo)
		if vm {
			buf = binary.LittleEndian.AppendUint64(buf, e.version)
		}
		if len(buf) > spillBufBytes-24 {
			if _, err := f.Write(buf); err != nil {
				_ = f.Close()
				return fmt.Errorf("write load spill: %w", err)
			}
			buf = buf[:0]
		}
	}
	if _, err := f.Write(buf); err != nil {
		_ = f.Close()
		return fmt.Errorf("write load spill: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write load spill: %w", err)
	}
	s.spill.files = append(s.spill.files, spillFile{path: path, segs: segmentsOf(es)})
	return nil
}

// loadPart is one sstable of the runs writeLoad makes: the keys of gen in
// the given hash halves, from every spill and the buffer.
type loadPart struct {
	gen    uint64
	halves []uint8
	id     uint64 // the run's
	keys   uint64 // at most: the sum of the sources' segments
	path   string
	// runKeys sizes the filter: the run's keys in all its parts, so that
	// the parts' filters are of one size and OR into the run's.
	runKeys uint64
	// Set by the writer.
	written uint64
	bytes   uint64
	filter  *memFilter
}

// writeLoad merges the spills and job.loaded (the newest source) into one
// run per generation at or above job.floor, ingests the runs and records
// them with job.state and the floor in one synced batch, then removes the
// spills. On the worker.
func (s *Store) writeLoad(job *flushJob) error {
	var mem []memEntry
	if job.loaded != nil {
		mem = sortLoaded(job.loaded)
	}
	memSegs := segmentsOf(mem)
	spills := s.spill.files
	// The parts, generation by generation.
	type genKeys struct{ n [2]uint64 }
	counts := map[uint64]*genKeys{}
	var gens []uint64
	count := func(segs []spillSeg) {
		for _, sg := range segs {
			g := counts[sg.gen]
			if g == nil {
				g = &genKeys{}
				counts[sg.gen] = g
				gens = append(gens, sg.gen)
			}
			g.n[sg.half] += uint64(sg.n)
		}
	}
	for _, f := range spills {
		count(f.segs)
	}
	count(memSegs)
	sort.Slice(gens, func(i, j int) bool { return gens[i] < gens[j] })
	fs := s.opts.FS
	var parts []*loadPart
	for _, gen := range gens {
		if gen < job.floor {
			continue
		}
		id := s.allocRun() // the merger hands out ids too
		n := counts[gen].n
		if n[0]+n[1] >= loadSplitKeys {
			parts = append(parts, &loadPart{gen: gen, halves: []uint8{0}, id: id, keys: n[0], runKeys: n[0] + n[1]},
				&loadPart{gen: gen, halves: []uint8{1}, id: id, keys: n[1], runKeys: n[0] + n[1]})
		} else {
			parts = append(parts, &loadPart{gen: gen, halves: []uint8{0, 1}, id: id, keys: n[0] + n[1], runKeys: n[0] + n[1]})
		}
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
			if err := s.writeLoadPart(parts[i], spills, mem, memSegs, wo); err != nil {
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
	for _, f := range spills {
		_ = fs.Remove(f.path)
	}
	s.spill.files = s.spill.files[:0]
	return nil
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// writeLoadPart writes part p: a k-way merge of its segments in every
// spill (oldest first) and in mem (the newest), the newest version of each
// key, into one sstable of packs (packs.go); the filter it builds
// (p.filter) is sized for the whole run (p.runKeys), so that writeLoad can
// combine the filters of a run's two parts.
func (s *Store) writeLoadPart(p *loadPart, spills []spillFile, mem []memEntry, memSegs []spillSeg, wo sstable.WriterOptions) (err error) {
	fs := s.opts.FS
	recLen := s.spillRecLen()
	files := make([]vfs.File, len(spills))
	defer func() {
		for _, f := range files {
			if f != nil {
				err = errors.Join(err, f.Close())
			}
		}
	}()
	out, err := fs.Create(p.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create loaded run %d: %w", p.id, err)
	}
	w := sstable.NewWriter(newRunWritable(out, s.opts.runWriteBuf), wo)
	closed := false
	defer func() {
		if !closed {
			_ = w.Close()
		}
	}()
	pw := newPackWriter(w, p.gen, p.id, s.opts.packKeysOrDefault(), s.opts.VersionMode, p.runKeys, runFilterBits(p.runKeys, s.memKeys))
	emit := func(h partition.Hash, v uint64) error {
		p.written++
		return pw.add(h, v)
	}
	var m loadMerge
	for _, half := range p.halves {
		m.reset()
		for i, f := range spills {
			sg, ok := findSeg(f.segs, p.gen, half)
			if !ok {
				continue
			}
			if files[i] == nil {
				if files[i], err = fs.Open(f.path); err != nil {
					return fmt.Errorf("open load spill: %w", err)
				}
			}
			m.addFile(files[i], sg, recLen, s.opts.VersionMode)
		}
		if sg, ok := findSeg(memSegs, p.gen, half); ok {
			m.addMem(mem[sg.off : sg.off+sg.n])
		}
		if err := m.run(emit); err != nil {
			return fmt.Errorf("write loaded run %d: %w", p.id, err)
		}
	}
	if err := pw.flush(); err != nil {
		return fmt.Errorf("write loaded run %d: %w", p.id, err)
	}
	p.filter = pw.finishFilter()
	closed = true
	if err := w.Close(); err != nil {
		return fmt.Errorf("write loaded run %d: %w", p.id, err)
	}
	if fi, err := fs.Stat(p.path); err == nil {
		p.bytes = uint64(fi.Size())
	}
	return nil
}

// loadSource is one sorted source of a merge: a spill segment read in
// chunks, or a slice of sorted entries.
type loadSource struct {
	f      vfs.File
	off    int64 // byte offset of the next chunk
	left   int64 // records not read yet
	recLen int
	vm     bool
	buf    []byte
	recs   []byte // records read, not yet consumed
	mem    []memEntry

	ok bool
	h  partition.Hash
	v  uint64
}

func (c *loadSource) next() error {
	if c.f == nil {
		if len(c.mem) == 0 {
			c.ok = false
			return nil
		}
		c.h, c.v, c.ok = c.mem[0].h, c.mem[0].version, true
		c.mem = c.mem[1:]
		return nil
	}
	if len(c.recs) == 0 {
		if c.left == 0 {
			c.ok = false
			return nil
		}
		n := min(c.left, spillReadRecs)
		b := c.buf[:n*int64(c.recLen)]
		if _, err := c.f.ReadAt(b, c.off); err != nil {
			return fmt.Errorf("read load spill: %w", err)
		}
		c.off += int64(len(b))
		c.left -= n
		c.recs = b
	}
	r := c.recs
	c.h = partition.Hash{Hi: binary.LittleEndian.Uint64(r[0:8]), Lo: binary.LittleEndian.Uint64(r[8:16])}
	if c.vm {
		c.v = binary.LittleEndian.Uint64(r[16:24])
	}
	c.recs = r[c.recLen:]
	c.ok = true
	return nil
}

// loadMerge merges sources added oldest first; of a hash in several, the
// newest one's version wins.
type loadMerge struct {
	srcs []*loadSource
	heap []int // indexes of srcs
	pool []*loadSource
}

func (m *loadMerge) reset() {
	m.pool = append(m.pool, m.srcs...)
	m.srcs = m.srcs[:0]
}

func (m *loadMerge) source() *loadSource {
	if n := len(m.pool); n > 0 {
		c := m.pool[n-1]
		m.pool = m.pool[:n-1]
		buf := c.buf
		*c = loadSource{buf: buf}
		return c
	}
	return &loadSource{}
}

func (m *loadMerge) addFile(f vfs.File, sg spillSeg, recLen int, vm bool) {
	c := m.source()
	c.f, c.off, c.left, c.recLen, c.vm = f, sg.off*int64(recLen), sg.n, recLen, vm
	if cap(c.buf) < spillReadRecs*recLen {
		c.buf = make([]byte, spillReadRecs*recLen)
	}
	c.buf = c.buf[:cap(c.buf)]
	m.srcs = append(m.srcs, c)
}

func (m *loadMerge) addMem(es []memEntry) {
	c := m.source()
	c.mem = es
	m.srcs = append(m.srcs, c)
}

// less orders sources by their current hash, the newer (higher index)
// first among equal ones.
func (m *loadMerge) less(a, b int) bool {
	x, y := &m.srcs[a].h, &m.srcs[b].h
	if x.Hi != y.Hi {
		return x.Hi < y.Hi
	}
	if x.Lo != y.Lo {
		return x.Lo < y.Lo
	}
	return a > b
}

func (m *loadMerge) down(i int) {
	h := m.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && m.less(h[r], h[l]) {
			j = r
		}
		if !m.less(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// run calls emit for every distinct hash in order.
func (m *loadMerge) run(emit func(partition.Hash, uint64) error) error {
	m.heap = m.heap[:0]
	for i, c := range m.srcs {
		if err := c.next(); err != nil {
			return err
		}
		if c.ok {
			m.heap = append(m.heap, i)
		}
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	for len(m.heap) > 0 {
		top := m.srcs[m.heap[0]]
		h, v := top.h, top.v
		if err := emit(h, v); err != nil {
			return err
		}
		// Advance every source at h: the newest came first.
		for len(m.heap) > 0 && m.srcs[m.heap[0]].h == h {
			c := m.srcs[m.heap[0]]
			if err := c.next(); err != nil {
				return err
			}
			if !c.ok {
				last := len(m.heap) - 1
				m.heap[0] = m.heap[last]
				m.heap = m.heap[:last]
			}
			if len(m.heap) > 0 {
				m.down(0)
			}
		}
	}
	return nil
}
