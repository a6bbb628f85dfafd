package statestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/dedupstream/dedupstream/partition"
)

// run is one sorted run of a generation: the sstables the store wrote and
// ingested under the key prefix 0x01+gen+id.
//
// lo and hi are the ids of the oldest and newest leaf runs (runs a flush or
// a bulk load wrote from memory) whose keys it holds: a leaf has lo = hi =
// id, a merged run the smallest lo and largest hi of its sources. A run
// whose hi is below a Mark's NextRun holds only keys committed before that
// Mark, whatever its own id (ScanSince skips it).
type run struct {
	gen, id uint64
	keys    uint64
	bytes   uint64
	lo, hi  uint64
	filter  *memFilter // nil: not in memory (not recorded in the registry)
	blocks  *runBlocks // nil: read through Pebble (not recorded either)
}

// runSet is the registry of live runs. It is immutable once published:
// changes make a new one (copy on write), so readers hold it without locks.
type runSet struct {
	next uint64           // the id the next run gets
	gens map[uint64][]run // per generation, newest first (see add)
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

// add inserts r in its generation's list, which is ordered newest first by
// content: by the newest leaf a run holds (hi), then by id. The leaves of
// one generation's runs are disjoint, consecutive ranges (a merge takes
// consecutive runs of this order), so this is the order in which their
// keys were committed, and of a key in several runs (version mode) the
// first holds its newest version. A run's own id does not say that: a
// merge of older runs gets a higher id than newer leaves left beside it.
// (Encoding-1 runs have hi = id: the order they had then.)
func (rs *runSet) add(r run) {
	runs := append(rs.gens[r.gen], r)
	slices.SortFunc(runs, func(a, b run) int {
		if c := cmpU64(a.hi, b.hi); c != 0 {
			return -c
		}
		return -cmpU64(a.id, b.id)
	})
	rs.gens[r.gen] = runs
}

// remove takes the runs ids of gen out of rs and appends them to gone.
// rs must be a clone, the published set keeps its own slices.
func (rs *runSet) remove(gen uint64, ids []uint64, gone []run) []run {
	rs.gens[gen] = slices.DeleteFunc(rs.gens[gen], func(r run) bool {
		if slices.Contains(ids, r.id) {
			gone = append(gone, r)
			return true
		}
		return false
	})
	if len(rs.gens[gen]) == 0 {
		delete(rs.gens, gen)
	}
	return gone
}

// expire takes the generations below floor out of rs and appends their
// runs to gone.
func (rs *runSet) expire(floor uint64, gone []run) []run {
	for g, runs := range rs.gens {
		if g < floor {
			gone = append(gone, runs...)
			delete(rs.gens, g)
		}
	}
	return gone
}

// dropRuns releases the registry's hold of the runs a published set no
// longer names: their filters' and blocks' memory goes once no Reader
// holds them either. Only after the set without them is published: a
// Reader refreshing meanwhile still captures them from the published set,
// and a hold it could not take (dropped) left it reading such a run
// through a Pebble iterator alone (TestReaderHoldsRunsDuringMerge).
func dropRuns(gone []run) {
	for _, r := range gone {
		r.filter.drop()
		r.blocks.drop()
	}
}

// keepFilters reserves the memory of the in-memory filters of runs in the
// store's block cache. Under regMu, as the runs are recorded.
func (s *Store) keepFilters(runs ...run) {
	for _, r := range runs {
		if r.filter != nil && r.filter.release == nil {
			r.filter.release = s.cache.Reserve(len(r.filter.f))
		}
		if r.blocks != nil && r.blocks.release == nil {
			r.blocks.release = s.cache.Reserve(r.blocks.mem)
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
// run uvarint gen, id, keys, bytes, and from encoding 2 on id-lo and id-hi
// (the run's leaf range, see run). A registry of encoding 1 (before leaf
// ranges) reads with lo 0 and hi = id: each of its runs counts as possibly
// holding keys of any leaf up to its own id, which is what ScanSince assumed
// of every run then.
const (
	runsEncoding   = 2
	runsEncodingV1 = 1
)

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
			b = binary.AppendUvarint(b, r.id-r.lo)
			b = binary.AppendUvarint(b, r.id-r.hi)
		}
	}
	return b
}

var errCorruptRuns error = &corruptError{errors.New("statestore: corrupt run registry")}

func decodeRuns(v []byte) (*runSet, error) {
	rs := &runSet{gens: map[uint64][]run{}}
	if len(v) < 1 || (v[0] != runsEncoding && v[0] != runsEncodingV1) {
		return nil, errCorruptRuns
	}
	ranges := v[0] >= 2
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
		r.hi = r.id
		if ranges {
			dlo, dhi := next(), next()
			if dlo > r.id || dhi > dlo {
				bad = true
				break
			}
			r.lo, r.hi = r.id-dlo, r.id-dhi
		}
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

// runWriter writes the sorted keys of one run into sstables, as packs
// (packs.go): one, or (for a merge under a split policy) several of at most
// mergePolicy.splitKeys keys each, consecutive in key order. It builds the
// run's filter from the hashes themselves: the sstables carry no filter of
// their own (a pack's key is not a hash a lookup asks for).
type runWriter struct {
	s      *Store
	paths  []string
	w      *sstable.Writer
	pw     *packWriter
	inFile uint64 // keys in w
	split  uint64 // keys per sstable (0: one sstable)
	r      run
}

// newRunWriter starts leaf run id of gen (mergeRuns sets its leaf range),
// in sstables of at most split keys (0: one sstable), whose filter is sized
// for keys keys (more are accepted, at a higher false-positive rate) at
// runFilterBits.
func (s *Store) newRunWriter(gen, id, keys, split uint64) (*runWriter, error) {
	rw := &runWriter{s: s, r: run{gen: gen, id: id, lo: id, hi: id}, split: split}
	rw.pw = newPackWriter(nil, gen, id, s.opts.packKeysOrDefault(), s.opts.VersionMode, keys, runFilterBits(keys, s.memKeys))
	return rw, rw.next()
}

// runWriterOptions are the sstable writer options of runs: no filter
// block (the run's filter is the store's own, built from the hashes).
func (s *Store) runWriterOptions() sstable.WriterOptions {
	wo := s.po.MakeWriterOptions(6, s.db.TableFormat())
	wo.FilterPolicy = pebble.NoFilterPolicy
	return wo
}

// next closes the current sstable, if any, and starts the next one.
func (rw *runWriter) next() error {
	if rw.w != nil {
		if err := rw.pw.flush(); err != nil {
			return fmt.Errorf("write run %d: %w", rw.r.id, err)
		}
		if err := rw.w.Close(); err != nil {
			return fmt.Errorf("write run %d: %w", rw.r.id, err)
		}
		rw.w = nil
	}
	fs := rw.s.opts.FS
	path := fs.PathJoin(rw.s.dir, ingestDir, fmt.Sprintf("%06d-%03d.sst", rw.r.id, len(rw.paths)))
	f, err := rw.s.createTable(path)
	if err != nil {
		return fmt.Errorf("create run %d: %w", rw.r.id, err)
	}
	rw.paths = append(rw.paths, path)
	rw.w = sstable.NewWriter(f, rw.s.runWriterOptions())
	rw.pw.w = rw.w
	rw.inFile = 0
	return nil
}

// add appends h; keys must come in ascending hash order without repeats.
func (rw *runWriter) add(h partition.Hash, version uint64) error {
	if rw.split > 0 && rw.inFile >= rw.split {
		if err := rw.next(); err != nil {
			return err
		}
	}
	rw.r.keys++
	rw.inFile++
	return rw.pw.add(h, version)
}

// finish closes (and syncs) the sstables and returns the run they hold,
// with its filter.
func (rw *runWriter) finish() (run, error) {
	if err := rw.pw.flush(); err != nil {
		return run{}, fmt.Errorf("write run %d: %w", rw.r.id, err)
	}
	rw.r.filter = rw.pw.finishFilter()
	if err := setFilterChunks(rw.w, rw.r.gen, rw.r.id, rw.r.filter.f); err != nil {
		return run{}, fmt.Errorf("write run %d: %w", rw.r.id, err)
	}
	if err := rw.w.Close(); err != nil {
		return run{}, fmt.Errorf("write run %d: %w", rw.r.id, err)
	}
	rw.w = nil
	for _, p := range rw.paths {
		if fi, err := rw.s.opts.FS.Stat(p); err == nil {
			rw.r.bytes += uint64(fi.Size())
		}
	}
	rw.r.blocks = rw.s.runBlocksOrNil(rw.r.gen, rw.r.id, rw.paths)
	return rw.r, nil
}

// flushJob hands a full memIndex to the flusher.
type flushJob struct {
	mem    *memIndex
	loaded *loadBuffer // instead of mem: the keys of Loads (loadwrite.go)
	state  State       // the state of the last commit in mem
	floor  uint64      // the floor in force when mem was handed over
	err    error
	done   chan struct{}
	// log is mem's commit log, which the worker syncs and closes before it
	// writes mem (closing logSynced), so that the stage's Commit that
	// filled mem does not wait for the disk; Flush waits for logSynced.
	log       *commitLog
	logSynced chan struct{}
}

// syncLog makes job's commit log durable and closes it; a failure is fatal,
// and recorded so before logSynced closes (a Flush woken by it must see
// it). On the worker, before the job's keys are written.
func (s *Store) syncLog(job *flushJob) error {
	defer close(job.logSynced)
	if job.log == nil {
		return nil
	}
	err := job.log.sync()
	if cerr := job.log.close(); err == nil {
		err = cerr
	}
	job.log = nil
	if err != nil {
		return s.fatal.set(err)
	}
	return nil
}

// postFlush queues job on the worker: it writes job's keys into runs, then
// kicks the merger, which merges runs where a tier filled up (under an
// inline policy the worker merges them itself before its next task). The
// worker is the only goroutine that writes Pebble after Open besides the
// merger; the registry orders the two (Store.regMu). It reports false once
// the store is fatal.
func (s *Store) postFlush(job *flushJob) bool {
	return s.w.post(func() {
		job.err = s.runJob(func() error {
			if err := s.syncLog(job); err != nil {
				return err
			}
			return s.flushMem(job)
		})
		close(job.done)
		if job.err != nil {
			return
		}
		s.noteRuns()
		s.mergeAfterWrite()
	})
}

// mergeAfterWrite starts the merges a flush or a load made due: it kicks
// the merger, or under an inline policy merges on the worker. On the
// worker. No other goroutine runs merges: two would pick the same runs.
func (s *Store) mergeAfterWrite() {
	if s.merge.inline {
		s.mergePass()
		return
	}
	s.mg.kick(s.mergePass)
}

// mergePass is one pass of the merger: every merge due, then done. Any
// error but the merger's stop is fatal.
func (s *Store) mergePass() {
	if err := s.runJob(s.mergeTiers); err != nil {
		s.fatal.set(err)
	}
	s.noteRuns()
}

// noteRuns tells the budget, if any, the blocks the live runs need now.
func (s *Store) noteRuns() {
	if b := s.opts.budget; b != nil {
		b.noteRuns(s, s.runs.Load())
	}
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
	keysOf := job.mem.keysOf
	refs := s.sortBuffer(job.mem.len())
	s.flushRefs, s.flushCounts = job.mem.sortRefs(refs, s.flushCounts)
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
	var written []run
	var paths []string
	var rw *runWriter // the run being written: the current generation's
	finish := func() error {
		r, err := rw.finish()
		if err != nil {
			return err
		}
		written = append(written, r)
		paths = append(paths, rw.paths...)
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
				if rw, err = s.newRunWriter(e.gen, s.allocRun(), keysOf(e.gen), 0); err != nil {
					return err
				}
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
	if s.hooks.flushWritten != nil {
		s.hooks.flushWritten()
	}
	if err := s.publishRuns(job, written, "record runs", func() {
		if job.mem != nil && s.imm == job.mem {
			s.imm = nil
		}
	}); err != nil {
		return err
	}
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

// mergePolicy says which runs of a generation the flusher merges.
type mergePolicy struct {
	// fanout is how many runs of one size tier a generation collects
	// before they are merged into one run of the next tier: every key is
	// rewritten about log_fanout(generation size / index size) times, and a
	// generation holds at most fanout-1 runs per tier.
	fanout int
	// maxKeys: runs of at least this many keys are not merged again (0: no
	// cap). A cap bounds the rewrites per key at the cost of more runs a
	// read of the generation may probe.
	maxKeys uint64
	// splitKeys: a merged run is written as sstables of at most this many
	// keys (0: one sstable), which bounds each sstable's filter block and
	// the filter writer's memory.
	splitKeys uint64
	// excise: a merge's inputs leave Pebble's version at once (DB.Excise)
	// instead of through range deletions, which reach the last level
	// through compactions.
	excise bool
	// inline: the flusher runs the merges a flush made due before its next
	// flush, on the store's worker (before the merger: a handover then
	// waited for them), instead of handing them to the merger.
	inline bool
}

// defaultMergePolicy is what a store uses unless Options.merge says
// otherwise; see "Merges" in the package documentation for the
// measurements behind it.
var defaultMergePolicy = mergePolicy{fanout: 8, excise: true}

func (p mergePolicy) withDefaults() mergePolicy {
	if p.fanout < 2 {
		p.fanout = defaultMergePolicy.fanout
	}
	return p
}

// tier is the size class of a run of n keys: 0 up to baseKeys, then one per
// factor of fanout.
func (p mergePolicy) tier(n, baseKeys uint64) int {
	t := 0
	for lim := baseKeys; n > lim && t < 32; lim *= uint64(p.fanout) {
		t++
	}
	return t
}

// side says where run r lies against the merge barrier b: 0 if it holds
// only leaves made before b, 1 if only leaves made since, 2 if both (runs
// merged before the barrier moved, or read from an encoding-1 registry).
func side(r run, b uint64) int {
	switch {
	case r.hi < b:
		return 0
	case r.lo >= b:
		return 1
	}
	return 2
}

// pickMerge returns the runs of one generation to merge next, or nil: the
// oldest window of fanout consecutive runs (newest first, so their leaves
// are contiguous) of one tier, below the cap, on one side of the barrier.
// Keeping the sides apart means a run made since the last Mark never holds
// keys of runs made before it, so ScanSince after that Mark reads only the
// keys written since (see Store.Mark). The oldest, not the newest: the
// merger runs beside the flushes, so a tier may hold more than fanout runs
// when it looks, and the newest window would leave the oldest run of it
// behind, between bigger runs, for good.
func (p mergePolicy) pickMerge(runs []run, baseKeys, barrier uint64) []run {
	n := p.fanout
	for i := len(runs) - n; i >= 0; i-- {
		w := runs[i : i+n]
		t, sd := p.tier(w[0].keys, baseKeys), side(w[0], barrier)
		ok := p.maxKeys == 0 || w[0].keys < p.maxKeys
		for _, r := range w[1:] {
			ok = ok && p.tier(r.keys, baseKeys) == t && side(r, barrier) == sd &&
				(p.maxKeys == 0 || r.keys < p.maxKeys)
		}
		if ok {
			return w
		}
	}
	return nil
}

// publishRuns records written, with job's floor and state, in a registry
// built from the published one under regMu (the merger may have recorded a
// merge since the flush or load began), syncs it and publishes it; atView
// runs under viewMu as the new runs become visible. The runs' filters are
// kept in memory.
func (s *Store) publishRuns(job *flushJob, written []run, what string, atView func()) error {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	rs := s.runs.Load().clone()
	for _, r := range written {
		rs.add(r)
	}
	s.keepFilters(written...)
	gone := rs.expire(job.floor, nil)
	rs.next = s.nextRun
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
	// Synced: a flush removes the commit log of job.mem next; a load's
	// state is the point a restore resumes from after a crash.
	if err := pb.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	s.durableFloor = max(s.durableFloor, job.floor)
	s.viewMu.Lock()
	s.runs.Store(rs)
	if atView != nil {
		atView()
	}
	s.viewMu.Unlock()
	dropRuns(gone)
	return nil
}

// allocRun hands out the next run id.
func (s *Store) allocRun() uint64 {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	id := s.nextRun
	s.nextRun++
	return id
}

// errMergeExpired ends a merge whose generation expired while it ran.
var errMergeExpired = errors.New("statestore: merged generation expired")

// errMergeStopped ends a merge the merger's stop gave up on.
var errMergeStopped = errors.New("statestore: merge stopped: the store is closing")

// mergeStopCheck is how many keys a merge writes between two looks at the
// merger's stop flag.
const mergeStopCheck = 1 << 14

// mergeTiers merges, in every generation, windows of runs pickMerge names
// until there is none, or the merger stops.
func (s *Store) mergeTiers() error {
	for !s.mg.quit.Load() {
		rs := s.runs.Load()
		barrier := s.barrier.Load()
		var pick []run
		for _, runs := range rs.gens {
			if pick = s.merge.pickMerge(runs, s.memKeys, barrier); pick != nil {
				break
			}
		}
		if pick == nil {
			return nil
		}
		if err := s.mergeRuns(pick); errors.Is(err, errMergeStopped) {
			return nil
		} else if err != nil && !errors.Is(err, errMergeExpired) {
			return err
		}
	}
	return nil
}

// mergeRuns merges runs (one generation, newest first) into one new run.
// Of a key in several runs the newest version wins. The new run is ingested
// and published before the inputs are deleted, so a reader always finds
// every key in one of the runs its view names. A flush may record runs
// meanwhile: the new registry is made from the published one under regMu.
// If the generation expired meanwhile the output is dropped unrecorded.
func (s *Store) mergeRuns(runs []run) (err error) {
	gen := runs[0].gen
	var keys uint64
	for _, r := range runs {
		keys += r.keys
	}
	rw, err := s.newRunWriter(gen, s.allocRun(), keys, s.merge.splitKeys)
	if err != nil {
		return err
	}
	ingested := false
	defer func() {
		if rw.w != nil {
			_ = rw.w.Close()
		}
		if !ingested {
			for _, p := range rw.paths {
				_ = s.opts.FS.Remove(p)
			}
		}
	}()
	rw.r.lo, rw.r.hi = runs[0].lo, runs[0].hi
	for _, r := range runs[1:] {
		rw.r.lo, rw.r.hi = min(rw.r.lo, r.lo), max(rw.r.hi, r.hi)
	}
	srcs := make([]*runCursor, 0, len(runs))
	defer func() {
		for _, c := range srcs {
			_ = c.close()
		}
	}()
	for _, r := range runs {
		c, err := s.openRunCursor(r, nil)
		if err != nil {
			return fmt.Errorf("merge runs of generation %d: run %d: %w", gen, r.id, err)
		}
		srcs = append(srcs, c)
	}
	var n uint64
	err = mergeCursors(srcs, nil, func(h partition.Hash, v uint64) error {
		if n++; n%mergeStopCheck == 0 && s.mg.quit.Load() {
			return errMergeStopped
		}
		return rw.add(h, v)
	})
	if errors.Is(err, errMergeStopped) {
		return err
	}
	if err != nil {
		return fmt.Errorf("merge runs of generation %d: %w", gen, err)
	}
	r, err := rw.finish()
	if err != nil {
		return err
	}
	if s.hooks.mergeWritten != nil {
		s.hooks.mergeWritten()
	}
	if err := s.recordMerge(runs, r, rw.paths); err != nil || !s.merge.excise {
		ingested = err == nil
		return err
	}
	ingested = true
	for _, in := range runs {
		if err := s.db.Excise(context.Background(), pebble.KeyRange{Start: runStart(gen, in.id), End: runEnd(gen, in.id)}); err != nil {
			return fmt.Errorf("remove merged run %d: %w", in.id, err)
		}
	}
	return nil
}

// recordMerge ingests the merged run r (in paths) in place of runs and
// records the registry without them, under regMu. If runs expired since
// they were picked it records nothing and returns errMergeExpired.
func (s *Store) recordMerge(runs []run, r run, paths []string) error {
	gen := r.gen
	s.regMu.Lock()
	defer s.regMu.Unlock()
	cur := s.runs.Load()
	for _, in := range runs {
		if in.gen < s.durableFloor || !cur.has(gen, in.id) {
			// A flush recorded a floor above them since the pick.
			return errMergeExpired
		}
	}
	if err := s.db.Ingest(context.Background(), paths); err != nil {
		return fmt.Errorf("ingest merged run: %w", err)
	}
	s.mergedKeys += r.keys
	for _, p := range paths {
		_ = s.opts.FS.Remove(p)
	}
	ids := make([]uint64, len(runs))
	for i, in := range runs {
		ids[i] = in.id
	}
	rs := cur.clone()
	gone := rs.remove(gen, ids, nil)
	rs.add(r)
	s.keepFilters(r)
	rs.next = s.nextRun
	pb := s.db.NewBatch()
	defer pb.Close()
	if !s.merge.excise {
		for _, in := range runs {
			_ = pb.DeleteRange(runStart(gen, in.id), runEnd(gen, in.id), nil)
		}
	}
	_ = pb.Set(metaRunsKey, rs.encode(), nil)
	sync := pebble.NoSync
	if s.merge.excise {
		// The registry without the inputs must be durable before their
		// sstables go: a crash in between leaves them unnamed, and Open
		// deletes them (removeOrphans).
		sync = pebble.Sync
	}
	if err := pb.Commit(sync); err != nil {
		return fmt.Errorf("record merged run: %w", err)
	}
	if s.hooks.mergeRecorded != nil {
		s.hooks.mergeRecorded()
	}
	// Published once recorded, as a flush does: a Mark's NextRun (the
	// published next id) is then never above the registry's after a crash.
	s.viewMu.Lock()
	s.runs.Store(rs)
	s.viewMu.Unlock()
	dropRuns(gone)
	s.dropGetReader()
	return nil
}

// runCursor iterates one run in hash order, a pack at a time. Its Pebble
// calls go through via: Store.read for a scan on the caller's behalf, nil
// for a merge, which runs on the worker already and calls Pebble directly.
// A merge reads the run's files itself when it can (scan, blockscan.go).
type runCursor struct {
	it   *pebble.Iterator
	scan *blockScan // non-nil: packs come from here, not from it
	s    *Store
	r    run
	via  func(func() error) error
	// step is advance as a func value made once, for via (nil: on the
	// worker, advance is called directly).
	step func() error
	pack packView // the current pack (aliases the iterator's value or the scan's block)
	i    int      // the current hash's index in pack
	ok   bool
	h    partition.Hash
	v    uint64
}

func (s *Store) openRunCursor(r run, via func(func() error) error) (*runCursor, error) {
	c := &runCursor{s: s, r: r, via: via}
	if via != nil {
		c.step = c.advance
	}
	if via == nil && r.blocks != nil && r.blocks.acquire() {
		c.scan = newBlockScan(s, r)
		if err := c.advance(); err != nil {
			_ = c.close()
			return nil, err
		}
		return c, nil
	}
	open := func() (err error) {
		if c.it, err = c.newIter(); err == nil {
			c.ok = c.it.First()
			err = c.load()
		}
		return err
	}
	var err error
	if via == nil {
		err = open()
	} else {
		err = via(open)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// newIter returns an iterator over the run's packs only: its filter's
// chunks follow them.
func (c *runCursor) newIter() (*pebble.Iterator, error) {
	return c.s.db.NewIter(&pebble.IterOptions{LowerBound: runStart(c.r.gen, c.r.id), UpperBound: filterStart(c.r.gen, c.r.id)})
}

// load decodes the pack at the iterator and moves to its first hash.
func (c *runCursor) load() error {
	if !c.ok {
		if err := c.it.Error(); err != nil {
			// Pebble's error names no run ("merge runs of generation 1:
			// EOF", TestMergeScanReadFault).
			return fmt.Errorf("run %d through Pebble: %w", c.r.id, err)
		}
		return nil
	}
	_, _, last, ok := parseRunKey(c.it.Key())
	if !ok {
		return corruptf("corrupt key %x", c.it.Key())
	}
	v, err := c.it.ValueAndErr()
	if err != nil {
		return err
	}
	if err := c.loadPack(v); err != nil {
		return err
	}
	if c.pack.hash(c.pack.n-1) != last {
		return corruptf("corrupt pack %x: its last hash is %x", c.it.Key(), c.pack.hashes[len(c.pack.hashes)-16:])
	}
	return nil
}

// loadPack decodes pack value v and moves to its first hash.
func (c *runCursor) loadPack(v []byte) (err error) {
	if c.pack, err = decodePack(v); err != nil {
		return err
	}
	c.i = 0
	c.h, c.v = c.pack.hash(0), c.pack.version(0)
	return nil
}

// next advances c. A merge's cursors (via nil) step in place: handing a
// closure to via cost an allocation per key and cursor. Within a pack no
// Pebble call is made.
func (c *runCursor) next() error {
	if c.i+1 < c.pack.n {
		c.i++
		c.h, c.v = c.pack.hash(c.i), c.pack.version(c.i)
		return nil
	}
	if c.step == nil {
		return c.advance()
	}
	return c.via(c.step)
}

func (c *runCursor) advance() error {
	if c.scan == nil {
		c.ok = c.it.Next()
		return c.load()
	}
	v, ok, err := c.scan.next()
	switch {
	case errors.Is(err, errScanPebble):
		return c.toPebble()
	case err != nil:
		return err
	case !ok:
		c.ok = false
		return nil
	}
	c.ok = true
	return c.loadPack(v)
}

// toPebble hands the rest of the run from the scan to a Pebble iterator:
// it goes to the pack after the last one the scan gave, the pack whose key
// is that pack's last hash (c.h, at its end; none: the first pack).
func (c *runCursor) toPebble() (err error) {
	started := c.pack.n > 0
	c.closeScan()
	c.s.scanHandovers.Add(1)
	if c.it, err = c.newIter(); err != nil {
		return err
	}
	if !started {
		c.ok = c.it.First()
		return c.load()
	}
	var k [bucketKeyLen]byte
	putRunKey(k[:], c.r.gen, c.r.id, c.h)
	if c.ok = c.it.SeekGE(k[:]); c.ok && bytes.Equal(c.it.Key(), k[:]) {
		c.ok = c.it.Next()
	}
	return c.load()
}

func (c *runCursor) closeScan() {
	if c.scan != nil {
		c.scan.rb.unref()
		c.scan = nil
	}
}

func (c *runCursor) close() error {
	c.closeScan()
	if c.it == nil {
		return nil
	}
	if c.via == nil {
		return c.it.Close()
	}
	return c.via(c.it.Close)
}

// mergeCursors calls fn for every distinct hash of mem (sorted entries, the
// newest source) and srcs (newest first), in hash order; of a hash in
// several sources the newest one's version is passed.
//
// One pass over the sources finds the smallest hash, the newest source
// holding it and whether another source holds it too. Only then (a key
// in two runs: version mode, or a replay after a crash) does a second
// pass advance every holder; otherwise the one holder advances. Two
// passes for every key cost the merges of a 100M-key fill a compare and
// a branch per source and key more.
func mergeCursors(srcs []*runCursor, mem []memEntry, fn func(partition.Hash, uint64) error) error {
	less := func(a, b partition.Hash) bool { return a.Hi < b.Hi || (a.Hi == b.Hi && a.Lo < b.Lo) }
	for {
		var min partition.Hash
		var v uint64
		found, dup := false, false
		best := -1 // the holder in srcs; -1: mem
		if len(mem) > 0 {
			min, v, found = mem[0].h, mem[0].version, true
		}
		for i, c := range srcs {
			switch {
			case !c.ok:
			case !found || less(c.h, min):
				min, v, found, best, dup = c.h, c.v, true, i, false
			case c.h == min:
				dup = true // an older source holds it too: v stays the newer one's
			}
		}
		if !found {
			return nil
		}
		switch {
		case !dup && best < 0:
			mem = mem[1:]
		case !dup:
			if err := srcs[best].next(); err != nil {
				return err
			}
		default:
			if len(mem) > 0 && mem[0].h == min {
				mem = mem[1:]
			}
			for _, c := range srcs {
				if c.ok && c.h == min {
					if err := c.next(); err != nil {
						return err
					}
				}
			}
		}
		if err := fn(min, v); err != nil {
			return err
		}
	}
}
