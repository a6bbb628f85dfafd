package statestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// run is one sorted run of a generation: an sstable the store wrote and
// ingested under the key prefix 0x01+gen+id.
type run struct {
	gen, id uint64
	keys    uint64
	bytes   uint64
}

// runSet is the registry of live runs. It is immutable once published:
// changes make a new one (copy on write), so readers hold it without locks.
type runSet struct {
	next uint64           // the id the next run gets
	gens map[uint64][]run // per generation, newest (highest id) first
}

func (rs *runSet) of(gen uint64) []run {
	if rs == nil {
		return nil
	}
	return rs.gens[gen]
}

func (rs *runSet) clone() *runSet {
	c := &runSet{next: rs.next, gens: make(map[uint64][]run, len(rs.gens))}
	for g, runs := range rs.gens {
		c.gens[g] = slices.Clone(runs)
	}
	return c
}

func (rs *runSet) add(r run) {
	runs := append(rs.gens[r.gen], r)
	slices.SortFunc(runs, func(a, b run) int { return -cmpU64(a.id, b.id) })
	rs.gens[r.gen] = runs
}

func (rs *runSet) remove(gen uint64, ids []uint64) {
	rs.gens[gen] = slices.DeleteFunc(rs.gens[gen], func(r run) bool { return slices.Contains(ids, r.id) })
	if len(rs.gens[gen]) == 0 {
		delete(rs.gens, gen)
	}
}

func (rs *runSet) expire(floor uint64) {
	for g := range rs.gens {
		if g < floor {
			delete(rs.gens, g)
		}
	}
}

func (rs *runSet) has(gen, id uint64) bool {
	for _, r := range rs.gens[gen] {
		if r.id == id {
			return true
		}
	}
	return false
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Registry encoding: version byte, uvarint next id, uvarint count, then per
// run uvarint gen, id, keys, bytes.
const runsEncoding = 1

func (rs *runSet) encode() []byte {
	b := []byte{runsEncoding}
	b = binary.AppendUvarint(b, rs.next)
	n := 0
	for _, runs := range rs.gens {
		n += len(runs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	gens := make([]uint64, 0, len(rs.gens))
	for g := range rs.gens {
		gens = append(gens, g)
	}
	slices.Sort(gens)
	for _, g := range gens {
		for _, r := range rs.gens[g] {
			b = binary.AppendUvarint(b, r.gen)
			b = binary.AppendUvarint(b, r.id)
			b = binary.AppendUvarint(b, r.keys)
			b = binary.AppendUvarint(b, r.bytes)
		}
	}
	return b
}

var errCorruptRuns = errors.New("statestore: corrupt run registry")

func decodeRuns(v []byte) (*runSet, error) {
	rs := &runSet{gens: map[uint64][]run{}}
	if len(v) < 1 || v[0] != runsEncoding {
		return nil, errCorruptRuns
	}
	v = v[1:]
	bad := false
	next := func() uint64 {
		x, k := binary.Uvarint(v)
		if k <= 0 {
			bad = true
			return 0
		}
		v = v[k:]
		return x
	}
	rs.next = next()
	n := next()
	for i := uint64(0); i < n && !bad; i++ {
		r := run{gen: next(), id: next(), keys: next(), bytes: next()}
		rs.add(r)
	}
	if bad || len(v) != 0 {
		return nil, errCorruptRuns
	}
	return rs, nil
}

// ingestDir holds the sstables of runs being written, before Pebble links
// them into its own directory. Leftovers of a crash are removed at Open.
const ingestDir = "ingest"

// runWriter writes the sorted keys of one run into an sstable.
type runWriter struct {
	s    *Store
	path string
	w    *sstable.Writer
	r    run
	key  [bucketKeyLen]byte
	val  [maxValueLen]byte
}

// newRunWriter starts run id of gen, whose sstable filter is sized for at
// most keys keys (more are accepted, at a higher false-positive rate).
func (s *Store) newRunWriter(gen, id, keys uint64) (*runWriter, error) {
	fs := s.opts.FS
	path := fs.PathJoin(s.dir, ingestDir, fmt.Sprintf("%06d.sst", id))
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("create run %d: %w", id, err)
	}
	wo := s.po.MakeWriterOptions(6, s.db.TableFormat())
	wo.FilterPolicy = runFilter{keys: keys}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), wo)
	return &runWriter{s: s, path: path, w: w, r: run{gen: gen, id: id}}, nil
}

// add appends h; keys must come in ascending hash order without repeats.
func (rw *runWriter) add(h partition.Hash, version uint64) error {
	putRunKey(rw.key[:], rw.r.gen, rw.r.id, h)
	var v []byte
	if rw.s.opts.VersionMode {
		v = rw.val[:binary.PutUvarint(rw.val[:], version)]
	}
	rw.r.keys++
	return rw.w.Set(rw.key[:], v)
}

// finish closes (and syncs) the sstable and returns the run it holds.
func (rw *runWriter) finish() (run, error) {
	if err := rw.w.Close(); err != nil {
		return run{}, fmt.Errorf("write run %d: %w", rw.r.id, err)
	}
	if fi, err := rw.s.opts.FS.Stat(rw.path); err == nil {
		rw.r.bytes = uint64(fi.Size())
	}
	return rw.r, nil
}

// flushJob hands a full memIndex to the flusher.
type flushJob struct {
	mem    *memIndex
	loaded *loadBuffer // instead of mem: the keys of Loads
	state  State       // the state of the last commit in mem
	floor  uint64      // the floor in force when mem was handed over
	err    error
	done   chan struct{}
}

// postFlush queues job on the worker: it writes job's keys into runs, then
// merges runs where a tier filled up. The worker is the only goroutine that
// changes Pebble after Open, so flushes, merges and expiries are ordered. It
// reports false once the store is fatal.
func (s *Store) postFlush(job *flushJob) bool {
	return s.w.post(func() {
		job.err = s.runJob(func() error { return s.flushMem(job) })
		close(job.done)
		if job.err != nil {
			return
		}
		if err := s.runJob(s.mergeTiers); err != nil {
			s.fatal.set(err)
		}
	})
}

// runJob runs fn on the worker; any error of it is fatal (the caller must
// restore the store from the output topic).
func (s *Store) runJob(fn func() error) error {
	if err := s.fatal.get(); err != nil {
		return err
	}
	err := fn()
	if err != nil && !errors.Is(err, ErrFatal) {
		err = s.fatal.set(err)
	}
	return err
}

// flushMem writes job.mem as one run per generation, ingests the runs and
// then records them with the state and the floor in one synced batch. A
// crash between the two leaves runs the registry does not name: Open deletes
// them, and the commit log still holds their keys.
func (s *Store) flushMem(job *flushJob) error {
	// next returns the entries in (gen, hash) order, a batch at a time
	// (nil at the end).
	var next func() []memEntry
	// keysOf is how many keys of gen the flush writes: its run's filter
	// is sized for them.
	var keysOf func(gen uint64) uint64
	if job.mem != nil {
		keysOf = job.mem.keysOf
		s.flushRefs, s.flushTmp, s.flushCounts = job.mem.sortRefs(s.flushRefs, s.flushTmp, s.flushCounts)
		refs, m := s.flushRefs, job.mem
		if s.flushGather == nil {
			s.flushGather = make([]memEntry, memGatherLen)
		}
		next = func() []memEntry {
			n := min(len(refs), memGatherLen)
			if n == 0 {
				return nil
			}
			out := s.flushGather[:n]
			m.gatherRefs(out, refs[:n])
			refs = refs[n:]
			return out
		}
	} else {
		es := sortLoaded(job.loaded)
		keysOf = func(gen uint64) uint64 {
			lo, _ := slices.BinarySearchFunc(es, gen, func(e memEntry, g uint64) int { return cmpU64(e.gen, g) })
			hi, _ := slices.BinarySearchFunc(es, gen+1, func(e memEntry, g uint64) int { return cmpU64(e.gen, g) })
			return uint64(hi - lo)
		}
		next = func() []memEntry {
			out := es
			es = nil
			return out
		}
	}
	rs := s.runs.Load().clone()
	var written []run
	var paths []string
	var rw *runWriter // the run being written: the current generation's
	finish := func() error {
		r, err := rw.finish()
		if err != nil {
			return err
		}
		written = append(written, r)
		paths = append(paths, rw.path)
		rw = nil
		return nil
	}
	for batch := next(); batch != nil; batch = next() {
		for i := range batch {
			e := &batch[i]
			if e.gen < job.floor {
				continue
			}
			if rw != nil && rw.r.gen != e.gen {
				if err := finish(); err != nil {
					return err
				}
			}
			if rw == nil {
				var err error
				if rw, err = s.newRunWriter(e.gen, rs.next, keysOf(e.gen)); err != nil {
					return err
				}
				rs.next++
			}
			if err := rw.add(e.h, e.version); err != nil {
				return fmt.Errorf("write run %d: %w", rw.r.id, err)
			}
		}
	}
	if rw != nil {
		if err := finish(); err != nil {
			return err
		}
	}
	if len(paths) > 0 {
		if err := s.db.Ingest(context.Background(), paths); err != nil {
			return fmt.Errorf("ingest runs: %w", err)
		}
	}
	for _, r := range written {
		rs.add(r)
	}
	rs.expire(job.floor)
	pb := s.db.NewBatch()
	defer pb.Close()
	if job.floor > s.durableFloor {
		var fb [8]byte
		binary.BigEndian.PutUint64(fb[:], job.floor)
		_ = pb.DeleteRange(bucketsStart, genStart(job.floor), nil)
		_ = pb.Set(metaFloorKey, fb[:], nil)
	}
	if job.state.Seq > 0 {
		_ = pb.Set(metaStateKey, appendState(nil, job.state), nil)
	}
	_ = pb.Set(metaRunsKey, rs.encode(), nil)
	// Synced: the commit log of job.mem is removed next.
	if err := pb.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("record runs: %w", err)
	}
	s.durableFloor = max(s.durableFloor, job.floor)
	s.viewMu.Lock()
	s.runs.Store(rs)
	if job.mem != nil && s.imm == job.mem {
		s.imm = nil
	}
	s.viewMu.Unlock()
	s.dropGetReader()
	for _, p := range paths {
		_ = s.opts.FS.Remove(p) // Pebble holds a link of its own
	}
	if job.mem != nil {
		defer s.retire(job.mem)
	}
	if job.mem != nil && job.mem.logNum != 0 {
		// Every log up to the index's own holds only commits now in runs
		// (after a restart, the index replayed several).
		nums, err := listLogs(s.opts.FS, s.dir)
		if err != nil {
			return fmt.Errorf("list commit logs: %w", err)
		}
		for _, n := range nums {
			if n > job.mem.logNum {
				break
			}
			if err := s.opts.FS.Remove(s.opts.FS.PathJoin(s.dir, logName(n))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove commit log: %w", err)
			}
		}
	}
	return nil
}

// mergeFanout is how many runs of one size tier a generation collects before
// they are merged into one run of the next tier: every key is rewritten
// about log4(generation size / run size) times, and a generation holds at
// most 3 runs per tier.
const mergeFanout = 4

// tier is the size class of a run of n keys: 0 up to baseKeys, then one per
// factor of mergeFanout.
func tier(n, baseKeys uint64) int {
	t := 0
	for lim := baseKeys; n > lim && t < 32; lim *= mergeFanout {
		t++
	}
	return t
}

// mergeTiers merges, in every generation, the newest mergeFanout runs while
// they are of one tier.
func (s *Store) mergeTiers() error {
	for {
		rs := s.runs.Load()
		var pick []run
		for _, runs := range rs.gens {
			if len(runs) < mergeFanout {
				continue
			}
			newest := runs[:mergeFanout]
			t := tier(newest[0].keys, s.memKeys)
			same := true
			for _, r := range newest[1:] {
				same = same && tier(r.keys, s.memKeys) == t
			}
			if same {
				pick = newest
				break
			}
		}
		if pick == nil {
			return nil
		}
		if err := s.mergeRuns(pick); err != nil {
			return err
		}
	}
}

// mergeRuns merges runs (one generation, newest first) into one new run.
// Of a key in several runs the newest version wins. The new run is ingested
// and published before the inputs are deleted, so a reader always finds
// every key in one of the runs its view names.
func (s *Store) mergeRuns(runs []run) error {
	gen := runs[0].gen
	rs := s.runs.Load().clone()
	id := rs.next
	rs.next++
	var keys uint64
	for _, r := range runs {
		keys += r.keys
	}
	rw, err := s.newRunWriter(gen, id, keys)
	if err != nil {
		return err
	}
	srcs := make([]*runCursor, 0, len(runs))
	defer func() {
		for _, c := range srcs {
			_ = c.close()
		}
	}()
	for _, r := range runs {
		c, err := s.openRunCursor(r, onWorker)
		if err != nil {
			return err
		}
		srcs = append(srcs, c)
	}
	err = mergeCursors(srcs, nil, func(h partition.Hash, v uint64) error { return rw.add(h, v) })
	if err != nil {
		return fmt.Errorf("merge runs of generation %d: %w", gen, err)
	}
	r, err := rw.finish()
	if err != nil {
		return err
	}
	if err := s.db.Ingest(context.Background(), []string{rw.path}); err != nil {
		return fmt.Errorf("ingest merged run: %w", err)
	}
	_ = s.opts.FS.Remove(rw.path)
	ids := make([]uint64, len(runs))
	for i, in := range runs {
		ids[i] = in.id
	}
	rs.remove(gen, ids)
	rs.add(r)
	s.viewMu.Lock()
	s.runs.Store(rs)
	s.viewMu.Unlock()
	s.dropGetReader()
	pb := s.db.NewBatch()
	defer pb.Close()
	for _, in := range runs {
		_ = pb.DeleteRange(runStart(gen, in.id), runEnd(gen, in.id), nil)
	}
	_ = pb.Set(metaRunsKey, rs.encode(), nil)
	if err := pb.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("record merged run: %w", err)
	}
	return nil
}

// runCursor iterates one run in hash order. Its Pebble calls go through
// via: Store.read for a scan on the caller's behalf, onWorker for a merge,
// which runs on the worker already.
type runCursor struct {
	it  *pebble.Iterator
	via func(func() error) error
	ok  bool
	h   partition.Hash
	v   uint64
}

// onWorker runs fn where the caller is: on the worker.
func onWorker(fn func() error) error { return fn() }

func (s *Store) openRunCursor(r run, via func(func() error) error) (*runCursor, error) {
	c := &runCursor{via: via}
	err := via(func() (err error) {
		c.it, err = s.db.NewIter(&pebble.IterOptions{LowerBound: runStart(r.gen, r.id), UpperBound: runEnd(r.gen, r.id)})
		if err == nil {
			c.ok = c.it.First()
			err = c.load()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (c *runCursor) load() error {
	if !c.ok {
		return c.it.Error()
	}
	_, _, h, ok := parseRunKey(c.it.Key())
	if !ok {
		return fmt.Errorf("corrupt key %x", c.it.Key())
	}
	v, err := c.it.ValueAndErr()
	if err != nil {
		return err
	}
	c.h = h
	c.v, err = decodeVersion(v)
	return err
}

func (c *runCursor) next() error {
	return c.via(func() error {
		c.ok = c.it.Next()
		return c.load()
	})
}

func (c *runCursor) close() error { return c.via(c.it.Close) }

// mergeCursors calls fn for every distinct hash of mem (sorted entries, the
// newest source) and srcs (newest first), in hash order; of a hash in
// several sources the newest one's version is passed.
func mergeCursors(srcs []*runCursor, mem []memEntry, fn func(partition.Hash, uint64) error) error {
	less := func(a, b partition.Hash) bool { return a.Hi < b.Hi || (a.Hi == b.Hi && a.Lo < b.Lo) }
	for {
		var min partition.Hash
		var v uint64
		found := false
		if len(mem) > 0 {
			min, v, found = mem[0].h, mem[0].version, true
		}
		for _, c := range srcs {
			if c.ok && (!found || less(c.h, min)) {
				min, v, found = c.h, c.v, true
			}
		}
		if !found {
			return nil
		}
		// min's version comes from the newest source holding it: mem first,
		// then srcs in order. Recompute it, then advance every holder.
		taken := false
		if len(mem) > 0 && mem[0].h == min {
			v, taken = mem[0].version, true
			mem = mem[1:]
		}
		for _, c := range srcs {
			if c.ok && c.h == min {
				if !taken {
					v, taken = c.v, true
				}
				if err := c.next(); err != nil {
					return err
				}
			}
		}
		if err := fn(min, v); err != nil {
			return err
		}
	}
}
