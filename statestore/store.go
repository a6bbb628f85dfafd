package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable/colblk"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// ErrClosed is returned by every call on a closed Store.
var ErrClosed = errors.New("statestore: closed")

// ErrLocked is matched by the error of Open when another process (or
// another Store in this one) has the store open: Pebble's directory lock is
// held.
var ErrLocked = errors.New("statestore: locked: another process has the store open (a running job?)")

// ErrNotExist is matched by the error of a read-only Open of a directory
// that holds no store.
var ErrNotExist = errors.New("statestore: no store")

// State is the checkpoint a Commit records atomically with its keys.
type State struct {
	// Seq counts Commits: the store assigns prev+1 on every Commit. A store
	// that never committed has Seq 0.
	Seq uint64
	// Generation is the stage's current generation at the Commit.
	Generation uint64
	// Checkpoint is opaque to the store (the stage keeps its input offsets
	// and next output offset there).
	Checkpoint []byte
}

// Store is the exact state of one stage: which keys were emitted in which
// live generation. Get, Lookup, ScanGeneration, Generations, DiskUsage,
// State and Err may be called concurrently with each other and with one
// writer; Commit, Expire, Flush and Compact are serialised internally. Close
// must not race with any other call.
type Store struct {
	db    *pebble.DB
	cache *pebble.Cache // Pebble's block cache (the DB holds a reference)
	po    *pebble.Options
	opts  Options
	// blockSchema and cmp decode run blocks read by Readers themselves
	// (blocks.go).
	blockSchema *colblk.KeySchema
	cmp         *pebble.Comparer
	dir         string
	fatal       *fatalState
	// getRd serves Get and Lookup, refreshed per call under getMu; a call
	// that finds it busy opens a Reader of its own.
	getMu   sync.Mutex
	getRd   Reader
	spare   atomic.Pointer[memIndex] // a flushed index no Reader holds, for reuse
	memKeys uint64                   // keys a memIndex collects before it becomes a run
	merge   mergePolicy              // which runs the flusher merges
	// barrier is the merge barrier (see Mark): no merge mixes runs made
	// before it with runs made since.
	barrier atomic.Uint64
	// mergedKeys counts the keys merges wrote (merger only; benchmarks
	// read it once the merger is idle).
	mergedKeys uint64
	// scannedBlocks and scanHandovers count the blocks merges read
	// themselves and the runs whose rest they read through Pebble
	// (blockscan.go; for tests).
	scannedBlocks, scanHandovers atomic.Uint64
	// stallNanos is the time Commits and Expires spent waiting for the
	// previous index's flush at a handover (BenchmarkMergePolicy's stall-ms).
	stallNanos atomic.Int64

	// regMu orders the changes of the run registry: run ids are handed out
	// (nextRun) and every new registry is built from the published one,
	// committed to Pebble and published under it, by the flusher and the
	// merger alike, so neither records a registry that drops the other's
	// runs.
	regMu   sync.Mutex
	nextRun uint64 // the id the next run gets (under regMu)
	// hooks are nil outside the tests of the merger (merger_test.go),
	// which hold a flush or a merge at the point where it has written its
	// runs and is about to record them.
	hooks struct{ flushWritten, mergeWritten, mergeRecorded func() }

	closed atomic.Bool

	wmu    sync.Mutex // serialises writers and Close
	log    *commitLog // the active memIndex's log (nil: no log)
	logNum uint64     // number of the newest log file
	job    *flushJob  // the memIndex being flushed (under wmu)
	// replayTorn: Open's replay of the commit logs stopped early (a torn
	// record or a gap); Open then waits for the replayed keys' flush.
	replayTorn bool

	// viewMu orders what readers see against the flusher: a reader takes
	// the read lock while it captures active, imm and runs and opens its
	// Pebble iterator; the flusher publishes under the write lock after its
	// runs are ingested and before it deletes anything they replace.
	viewMu sync.RWMutex
	active *memIndex // commits since the last handover (writer: under wmu)
	imm    *memIndex // handed to the flusher, not yet in runs
	runs   atomic.Pointer[runSet]

	loadBuf   *loadBuffer // keys of Loads not yet handed to the flusher (under wmu)
	loadSpare *loadBuffer // a load buffer the flusher is done with, for reuse (under wmu)
	loading   atomic.Bool // Loads not yet all in runs
	// loadWrites counts the load buffers handed to the flusher when full,
	// before their load ended (under wmu; tests).
	loadWrites int

	w     *worker // runs every write-path Pebble call but merges (see worker)
	mg    merger  // runs the merges (see merger)
	reads *worker // runs the read-path Pebble calls where needed (see readOnCaller)

	durableFloor uint64 // the floor recorded in Pebble (the flusher's, under regMu)
	// unreserve releases the index memory reserved in the block cache at
	// Open (Options.indexReservation); Close calls it (under wmu).
	unreserve func()
	// flushRefs and flushCounts are the flusher's sort buffers
	// (memIndex.sortRefs): 8 bytes per key of an index in flushBuf, off
	// the Go heap and resident from the first flush on (sortBuffer), and
	// up to 512 KiB of counts.
	flushBuf    []byte
	flushRefs   []uint64
	flushCounts []int
	flushGather []memEntry // memGatherLen entries

	// rec keeps the tables Pebble deletes for the next runs to overwrite
	// (recycle.go); nil in a read-only store or with recycling off.
	rec *recycler

	mu    sync.Mutex // guards state and floor for readers
	state State
	floor uint64 // every bucket < floor has been expired
}

// Open opens the store in dir, creating it if needed. dir may be a mount
// point: Pebble's files live in the subdirectory dir/db, the commit logs in
// dir itself.
func Open(dir string, opts Options) (*Store, error) {
	opts.applyDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	fatal := newFatalState(opts.Logger)
	w := startWorker(fatal)
	mw := startWorker(fatal)
	cache, release := opts.blockCache()
	defer release() // each DB holds its own reference
	rec := opts.recycler()
	po := opts.pebbleOptions(cache, fatal, rec)
	dbDir := opts.FS.PathJoin(dir, "db")
	fail := func(err error) (*Store, error) {
		_ = w.stop()
		_ = mw.stop()
		return nil, err
	}
	if opts.ReadOnly {
		po.ReadOnly = true
		if _, err := opts.FS.Stat(dbDir); err != nil {
			return fail(fmt.Errorf("%w in %s: %w", ErrNotExist, dir, err))
		}
	} else if err := createIfMissing(dbDir, &opts, po, w); err != nil {
		return fail(fmt.Errorf("statestore: create %s: %w", dbDir, err))
	}
	// Never let Pebble create a store in place: see createIfMissing.
	po.ErrorIfNotExists = true
	var db *pebble.DB
	err := w.do(func() (err error) {
		db, err = pebble.Open(dbDir, po)
		return err
	})
	if err != nil && fatal.releasable() && w.drain(releaseTimeout) && db != nil {
		// Data corruption a read inside pebble.Open met (its event made
		// the store fatal, which returned here at once) does not stop
		// pebble.Open, which may then succeed: close what it opened, or
		// its lock stays held (seen in race builds, whose invariant checks
		// read tables at open).
		_ = db.Close()
	}
	if err != nil {
		if isLockError(err) {
			return fail(fmt.Errorf("%w: %s: %w", ErrLocked, dbDir, err))
		}
		return fail(fmt.Errorf("statestore: open %s: %w", dbDir, markCorrupt(err)))
	}
	s := &Store{
		db:      db,
		cache:   cache,
		po:      po,
		opts:    opts,
		dir:     dir,
		fatal:   fatal,
		memKeys: opts.memKeys(),
		merge:   opts.merge.withDefaults(),
		w:       w,
		rec:     rec,
	}
	s.mg.w = mw
	s.cmp, s.blockSchema = blockDecoding(po)
	s.startReads()
	// load runs on the worker: it reads the metadata, deletes orphaned runs
	// with a synced batch and may hand the replayed logs to the flusher,
	// which is the worker too (its queue has room for that job).
	if err := w.do(s.load); err != nil {
		if ferr := s.fatal.get(); ferr != nil {
			// What the load met made the store fatal (data corruption a
			// read of Pebble's found): that error names the file.
			err = ferr
			if rerr := s.release(); rerr != nil {
				err = errors.Join(err, rerr)
			}
		} else if cerr := s.closeDB(); cerr != nil && !errors.Is(err, ErrFatal) {
			err = errors.Join(err, cerr)
		}
		return fail(fmt.Errorf("statestore: open %s: %w", dbDir, markCorrupt(err)))
	}
	if s.job != nil && s.replayTorn {
		// The replay stopped at a torn record (or a gap): the logs it
		// read stay until their keys are in runs, and a later replay
		// would stop at the same record again and never reach the logs
		// written from now on, losing commits a Flush made durable
		// (TestTornLogThenNewCommits). Their flush removes them: no
		// Commit is taken before it is done.
		if err := s.awaitFlush(); err != nil {
			if cerr := s.closeDB(); cerr != nil && !errors.Is(err, ErrFatal) {
				err = errors.Join(err, cerr)
			}
			return fail(fmt.Errorf("statestore: open %s: write the replayed commits: %w", dbDir, err))
		}
	}
	if n := opts.indexReservation(); n > 0 {
		s.unreserve = cache.Reserve(int(n))
	}
	if opts.budget != nil {
		opts.budget.attach(s, int64(opts.indexReservation()), s.runs.Load())
	}
	return s, nil
}

// createIfMissing creates an empty Pebble store in dbDir atomically: in a
// sibling directory first, renamed into place once complete. Pebble creating
// a DB in place and crashing before its directory entries are synced can
// leave a MANIFEST marker without the MANIFEST, which it then refuses to
// open; the error-injection test hit exactly that. A leftover of a crashed
// creation is removed.
func createIfMissing(dbDir string, opts *Options, po *pebble.Options, w *worker) error {
	fs := opts.FS
	tmp := dbDir + ".creating"
	if err := fs.RemoveAll(tmp); err != nil {
		return err
	}
	if _, err := fs.Stat(dbDir); err == nil {
		return nil // an existing store
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := fs.PathDir(dbDir)
	if err := fs.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	format := formatRecord(opts.VersionMode)
	if err := w.do(func() error {
		db, err := pebble.Open(tmp, po)
		if err != nil {
			return err
		}
		err = db.Set(metaFormatKey, format, pebble.NoSync)
		if err == nil && opts.DisableWAL {
			err = db.Flush()
		}
		// Close syncs the WAL.
		return errors.Join(err, db.Close())
	}); err != nil {
		return err
	}
	if err := fs.Rename(tmp, dbDir); err != nil {
		return err
	}
	// Make the rename durable, and dir's own entry if MkdirAll made it.
	for _, d := range []string{parent, fs.PathDir(parent)} {
		if err := syncDir(fs, d); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// formatRecord is the value of the format key.
func formatRecord(versionMode bool) []byte {
	f := []byte{layoutVersion, 0}
	if versionMode {
		f[1] |= formatFlagVersionMode
	}
	return f
}

// load reads the metadata (format, state, floor, runs), removes what a
// crash left half done, replays the commit logs and starts the flusher.
func (s *Store) load() (err error) {
	want := formatRecord(s.opts.VersionMode)
	v, ok, err := s.getMeta(metaFormatKey)
	switch {
	case err != nil:
		return err
	case !ok:
		return errors.New("statestore: no format record: not a statestore")
	case len(v) == 2 && v[0] < layoutOldest:
		return fmt.Errorf("statestore: %s holds a store of layout %d, this build reads layouts %d to %d: "+
			"remove the directory %s and restart; the job restores the store from the output topic", s.dir, v[0], layoutOldest, layoutVersion, s.dir)
	case len(v) != 2 || v[0] > layoutVersion:
		return fmt.Errorf("statestore: unsupported layout %x (this build writes %x)", v, want)
	case s.opts.ReadOnly:
		s.opts.VersionMode = v[1]&formatFlagVersionMode != 0
	case v[1] != want[1]:
		return fmt.Errorf("statestore: store was created with VersionMode=%t, opened with VersionMode=%t",
			v[1]&formatFlagVersionMode != 0, s.opts.VersionMode)
	case v[0] < layoutVersion:
		// An older layout this build reads as it is: record the new one
		// before writing anything of it, so that an older build refuses
		// the store instead of meeting runs it cannot read (keys.go).
		if err := s.db.Set(metaFormatKey, want, pebble.Sync); err != nil {
			return fmt.Errorf("statestore: record layout %d: %w", layoutVersion, err)
		}
	}
	if v, ok, err = s.getMeta(metaStateKey); err != nil {
		return err
	} else if ok {
		if s.state, err = decodeState(v); err != nil {
			return err
		}
	}
	if v, ok, err = s.getMeta(metaFloorKey); err != nil {
		return err
	} else if ok {
		if len(v) != 8 {
			return corruptf("statestore: corrupt expiry floor %x", v)
		}
		s.floor = binary.BigEndian.Uint64(v)
	}
	s.durableFloor = s.floor
	rs := &runSet{gens: map[uint64][]run{}}
	if v, ok, err = s.getMeta(metaRunsKey); err != nil {
		return err
	} else if ok {
		if rs, err = decodeRuns(v); err != nil {
			return err
		}
	}
	if !s.opts.ReadOnly {
		if err := s.removeOrphans(rs); err != nil {
			return err
		}
	}
	s.runs.Store(rs)
	s.nextRun = rs.next
	// A Mark saved before this Open has a NextRun of at most rs.next: runs
	// made from now on are not merged with older ones until the next Mark.
	s.barrier.Store(rs.next)
	if err := s.loadFilters(rs); err != nil {
		return err
	}
	if err := s.loadBlocks(rs); err != nil {
		return err
	}
	return s.recoverLogs()
}

// removeOrphans deletes the runs a crash left between their ingest and the
// batch naming them, and the sstables of runs that were never ingested.
//
// An orphan's id is at or past the registry's next id. The range deletion
// hides its keys, but its sstables stay until Pebble compacts them away,
// and Open (loadBlocks) takes every table in a run's key range for the
// run's own: a new run given the orphan's id in its generation was read
// with the orphan's tables, whose keys were never committed
// (TestOrphanRunIDReused). The registry's next id therefore moves past
// every orphan, in the batch that deletes them.
func (s *Store) removeOrphans(rs *runSet) error {
	if err := s.opts.FS.RemoveAll(s.opts.FS.PathJoin(s.dir, ingestDir)); err != nil {
		return fmt.Errorf("statestore: remove %s: %w", ingestDir, err)
	}
	if err := s.opts.FS.MkdirAll(s.opts.FS.PathJoin(s.dir, ingestDir), 0o755); err != nil {
		return fmt.Errorf("statestore: create %s: %w", ingestDir, err)
	}
	s.rec.start(s.opts.FS.PathJoin(s.dir, ingestDir))
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: bucketsStart, UpperBound: bucketsEnd})
	if err != nil {
		return err
	}
	var orphans [][2]uint64
	for ok := it.First(); ok; {
		gen, id, valid := parseRunOf(it.Key())
		if !valid {
			_ = it.Close()
			return corruptf("statestore: corrupt key %x", it.Key())
		}
		if !rs.has(gen, id) {
			orphans = append(orphans, [2]uint64{gen, id})
		}
		ok = it.SeekGE(runEnd(gen, id))
	}
	if err := it.Close(); err != nil {
		return err
	}
	if len(orphans) == 0 {
		return nil
	}
	pb := s.db.NewBatch()
	defer pb.Close()
	next := rs.next
	for _, o := range orphans {
		_ = pb.DeleteRange(runStart(o[0], o[1]), runEnd(o[0], o[1]), nil)
		next = max(next, o[1]+1)
	}
	if next > rs.next {
		rs.next = next
		_ = pb.Set(metaRunsKey, rs.encode(), nil)
	}
	s.opts.Logger.Info("statestore: removed runs a crash left unrecorded", "dir", s.dir, "runs", len(orphans))
	return pb.Commit(pebble.Sync)
}

// recoverLogs replays the commit logs written after the last run. A
// writable store then hands what they held to the flusher, which writes it
// as runs (the state and floor with them) and removes the logs, and starts
// a new log, so the next crash replays only what is committed from now on.
func (s *Store) recoverLogs() error {
	fs := s.opts.FS
	nums, err := listLogs(fs, s.dir)
	if err != nil {
		return fmt.Errorf("statestore: list commit logs: %w", err)
	}
	s.active = newMemIndex(0, 0)
	if !s.opts.ReadOnly {
		s.active = newMemIndex(0, s.memKeys)
	}
	if len(nums) > 0 {
		start := time.Now()
		rp, err := replayLogs(fs, s.dir, nums, s.state.Seq)
		if err != nil {
			return fmt.Errorf("statestore: %w", err)
		}
		s.active = rp.mem
		s.active.logNum = nums[len(nums)-1]
		if rp.state.Seq > 0 {
			s.state = rp.state
		}
		s.floor = max(s.floor, rp.floor)
		s.logNum = nums[len(nums)-1]
		s.replayTorn = rp.torn
		s.opts.Logger.Info("statestore: replayed commit logs", "dir", s.dir, "logs", len(nums),
			"keys", rp.mem.len(), "seq", s.state.Seq, "torn_tail", rp.torn, "took", time.Since(start))
	}
	if s.opts.ReadOnly {
		return nil
	}
	if len(nums) > 0 {
		// The replayed keys go to the flusher like a full index: readers
		// find them there at once, Open does not wait for their runs, and
		// the flusher removes the replayed logs once they are written.
		// Commits from now on go to a new log.
		if s.active.logNum == 0 {
			s.active.logNum = nums[len(nums)-1]
		}
		return s.handOver(false)
	}
	if !s.opts.DisableWAL {
		return s.newLog()
	}
	return nil
}

// newLog starts the commit log of the active memIndex.
func (s *Store) newLog() error {
	s.logNum++
	l, err := createLog(s.opts.FS, s.dir, s.logNum)
	if err != nil {
		return s.fatal.set(err)
	}
	s.log = l
	s.active.logNum = s.logNum
	return nil
}

// handOver passes the active memIndex to the flusher (after the previous
// one is flushed) with the current state and floor, and starts a new one
// with a new log unless closing. Called under wmu, or during Open.
func (s *Store) handOver(closing bool) error {
	if s.job != nil {
		t0 := time.Now()
		err := s.awaitFlush()
		s.stallNanos.Add(int64(time.Since(t0)))
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	st := s.state
	st.Checkpoint = append([]byte(nil), s.state.Checkpoint...)
	floor := s.floor
	s.mu.Unlock()
	// The log goes with the index: the worker syncs it before writing the
	// index (a sync here held the stage's Commit 20 ms at every handover,
	// 0.11 s per 6M records of the dsbench sweep), and Flush, which syncs
	// only the new log, waits for it first.
	job := &flushJob{mem: s.active, state: st, floor: floor, done: make(chan struct{}),
		log: s.log, logSynced: make(chan struct{})}
	s.log = nil
	next := s.spare.Swap(nil)
	if next != nil {
		next.reset(0)
	} else {
		next = newMemIndex(0, s.memKeys)
	}
	s.viewMu.Lock()
	s.imm = s.active
	s.active = next
	s.viewMu.Unlock()
	s.job = job
	if !s.postFlush(job) {
		return s.fatal.get()
	}
	if !closing && !s.opts.DisableWAL {
		return s.newLog()
	}
	return nil
}

// awaitFlush waits until the memIndex handed over last is in runs.
func (s *Store) awaitFlush() error {
	job := s.job
	if job == nil {
		return nil
	}
	select {
	case <-job.done:
	case <-s.fatal.dead:
		return s.fatal.get()
	}
	if job.err != nil {
		return job.err
	}
	s.job = nil
	return nil
}

// awaitLogSync waits until the log of the index handed over last is
// durable (flushJob.log). Under wmu.
func (s *Store) awaitLogSync() error {
	if s.job == nil || s.job.logSynced == nil {
		return nil
	}
	select {
	case <-s.job.logSynced:
	case <-s.fatal.dead:
		return s.fatal.get()
	}
	return s.fatal.get()
}

// getMeta returns a copy of a metadata value.
func (s *Store) getMeta(key []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("statestore: read %q: %w", key, err)
	}
	v = append([]byte(nil), v...)
	return v, true, closer.Close()
}

// usable returns the error every call reports once the store is closed or
// Pebble failed fatally.
func (s *Store) usable() error {
	if err := s.fatal.get(); err != nil {
		return err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// VersionMode reports whether the store keeps a version per key (dedup
// mode "version").
func (s *Store) VersionMode() bool { return s.opts.VersionMode }

// isLockError reports whether err is Pebble failing to take the directory
// lock: fcntl's EAGAIN or EACCES from another process, or Pebble's own
// refusal within one process.
func isLockError(err error) bool {
	var pe *os.PathError // creating the LOCK file failed: not a held lock
	if errors.As(err, &pe) {
		return false
	}
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held by current process")
}

// Err returns the fatal error Pebble reported, or nil. Once non-nil it stays
// so, and every other call returns it.
func (s *Store) Err() error { return s.fatal.get() }

// State returns the last committed state (as loaded by Open, then as written
// by each successful Commit). The Checkpoint is a copy.
func (s *Store) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	st.Checkpoint = append([]byte(nil), s.state.Checkpoint...)
	return st
}

// floorGen returns the expiry floor: every generation below it is gone.
func (s *Store) floorGen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.floor
}

// Get reports whether h was stored in generation gen, and its version in
// version mode (0 otherwise). Get does not allocate.
func (s *Store) Get(gen uint64, h partition.Hash) (version uint64, found bool, err error) {
	one := [1]uint64{gen}
	_, version, found, err = s.lookup(h, one[:])
	return version, found, err
}

// Lookup probes the generations in the given order (the caller passes the
// newest first, typically only those its Bloom front marks as "maybe") and
// returns the first one holding h. All probes read one consistent view.
func (s *Store) Lookup(h partition.Hash, gens []uint64) (gen, version uint64, found bool, err error) {
	if len(gens) == 0 {
		return 0, 0, false, s.usable()
	}
	return s.lookup(h, gens)
}

// lookup probes gens in order through the store's Get reader, refreshed
// first, or through a Reader of its own when another call holds it.
func (s *Store) lookup(h partition.Hash, gens []uint64) (gen, version uint64, found bool, err error) {
	if !s.getMu.TryLock() {
		var rd Reader
		if err := s.OpenReader(&rd); err != nil {
			return 0, 0, false, err
		}
		gen, version, found, err = rd.Lookup(h, gens)
		if cerr := rd.Close(); err == nil {
			err = cerr
		}
		return gen, version, found, err
	}
	defer s.getMu.Unlock()
	if s.closed.Load() {
		return 0, 0, false, ErrClosed
	}
	if err := s.OpenReader(&s.getRd); err != nil {
		return 0, 0, false, err
	}
	return s.getRd.Lookup(h, gens)
}

// dropGetReader closes the Get reader unless a call is using it, so that
// it pins no run the flusher just replaced or expired (Pebble keeps the
// files of such runs while an iterator on them is open). A busy reader
// lets them go at its next refresh.
func (s *Store) dropGetReader() {
	if s.getMu.TryLock() {
		_ = s.getRd.Close()
		s.getMu.Unlock()
	}
}

// closeGetReader closes the Get reader (before Pebble closes).
func (s *Store) closeGetReader() error {
	s.getMu.Lock()
	defer s.getMu.Unlock()
	return s.getRd.Close()
}

// ScanGeneration calls fn for every key of bucket gen, in hash order, until
// fn returns an error, which ScanGeneration then returns. It reads a
// consistent snapshot and serves the Bloom rebuild after a restart.
func (s *Store) ScanGeneration(gen uint64, fn func(h partition.Hash, version uint64) error) (err error) {
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.endLoad(); err != nil {
		return err
	}
	if gen < s.floorGen() {
		return nil
	}
	s.viewMu.RLock()
	active, imm, rs := s.active, s.imm, s.runs.Load()
	mem := active.sorted(gen, false)
	immEs := imm.sorted(gen, false)
	var srcs []*runCursor
	defer func() {
		for _, c := range srcs {
			if cerr := c.close(); err == nil && cerr != nil {
				err = s.readErr(cerr, "statestore: scan generation %d", gen)
			}
		}
	}()
	for _, r := range rs.of(gen) {
		c, err := s.openRunCursor(r, s.read)
		if err != nil {
			s.viewMu.RUnlock()
			return s.readErr(err, "statestore: scan generation %d", gen)
		}
		srcs = append(srcs, c)
	}
	s.viewMu.RUnlock()
	// The active keys are newer than imm's: merge them in first.
	if len(immEs) > 0 {
		mem = mergeMem(mem, immEs)
	}
	if err := mergeCursors(srcs, mem, fn); err != nil {
		return s.readErr(err, "statestore: scan generation %d", gen)
	}
	return nil
}

// mergeMem merges two sorted entry lists of one generation; of a key in
// both, newer's entry wins.
func mergeMem(newer, older []memEntry) []memEntry {
	out := make([]memEntry, 0, len(newer)+len(older))
	for len(newer) > 0 && len(older) > 0 {
		switch c := compareMem(&newer[0], &older[0]); {
		case c < 0:
			out, newer = append(out, newer[0]), newer[1:]
		case c > 0:
			out, older = append(out, older[0]), older[1:]
		default:
			out, newer, older = append(out, newer[0]), newer[1:], older[1:]
		}
	}
	out = append(out, newer...)
	return append(out, older...)
}

// Flush makes every successful Commit and Expire so far durable against a
// machine crash: with the commit log it syncs the log, without it writes
// the keys held in memory as runs. The stage need not call it (recovery
// re-reads the output topic); it bounds how much a crash can take back.
func (s *Store) Flush() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if s.opts.ReadOnly {
		return nil
	}
	if err := s.finishLoad(); err != nil {
		return err
	}
	if s.log != nil {
		if err := s.awaitLogSync(); err != nil {
			return err
		}
		if err := s.log.sync(); err != nil {
			return s.fatal.set(err)
		}
		return nil
	}
	if err := s.handOver(false); err != nil {
		return err
	}
	return s.awaitFlush()
}

// Close writes the keys held in memory as runs (so that the next Open has
// no log to replay), then closes Pebble. After a fatal error it returns that
// error and leaves Pebble as it is: its goroutines may be parked holding
// locks, and the process should exit. A second Close returns ErrClosed.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Swap(true) {
		return ErrClosed
	}
	if s.unreserve != nil {
		s.unreserve()
		s.unreserve = nil
	}
	if s.opts.budget != nil {
		s.opts.budget.detach(s)
	}
	if err := s.fatal.get(); err != nil {
		if rerr := s.release(); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	if s.opts.ReadOnly {
		return s.closeDB()
	}
	if err := s.finishLoad(); err != nil {
		return err
	}
	// durableFloor is the flusher's: wait for its last job before reading it.
	if err := s.awaitFlush(); err != nil {
		return err
	}
	var ferr error
	if s.active.len() > 0 || s.floor > s.durableFloor || s.log != nil {
		ferr = s.handOver(true)
		if ferr == nil {
			ferr = s.awaitFlush()
		}
		if errors.Is(ferr, ErrFatal) {
			return ferr
		}
	}
	if err := s.closeDB(); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}

// closeDB closes the Get reader, ends the merger (a merge in progress is
// abandoned: its inputs stay), then closes Pebble on the worker and ends the
// worker and the read worker.
func (s *Store) closeDB() error {
	if err := s.fatal.get(); err != nil {
		if rerr := s.release(); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	if err := s.closeGetReader(); err != nil {
		return err
	}
	// Flushes queued on the worker kick the merger: let them finish first.
	if err := s.w.do(func() error { return nil }); err != nil {
		return err
	}
	if err := s.mg.stop(); err != nil {
		return err
	}
	s.dropLiveRuns()
	err := s.w.do(s.db.Close)
	if err != nil {
		return err
	}
	if err := s.w.stop(); err != nil {
		return err
	}
	freeRegion(s.flushBuf) // the flusher's, and it has ended
	s.flushBuf = nil
	return s.stopReads()
}

// dropLiveRuns lets go of the registry's holds of every live run's filter and
// blocks (their memory returns when the last Reader lets go too), as the
// store closes.
func (s *Store) dropLiveRuns() {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if rs := s.runs.Load(); rs != nil {
		for _, runs := range rs.gens {
			dropRuns(runs)
		}
	}
}

// releaseTimeout bounds how long release waits for the store's goroutines
// to finish what they had queued.
const releaseTimeout = 30 * time.Second

// release closes a store that is fatal through corruption alone, so that
// its directory lock and files are let go and the directory can be moved
// aside and a new store opened in its place within this process (Pebble's
// lock is per path and per process). Corruption is found by reads, which
// return it, or by a flush or compaction, which ends with it: no goroutine
// is parked, so the workers drain their queues and Pebble closes. A store
// fatal for any other reason (a parked goroutine may hold Pebble's locks)
// is left open, as before: release returns nil and does nothing. It returns
// an error when the store's goroutines did not end within releaseTimeout;
// the directory then stays locked until the process exits.
func (s *Store) release() error {
	if !s.fatal.releasable() || s.db == nil {
		return nil
	}
	db := s.db
	s.db = nil
	s.getMu.Lock()
	_ = s.getRd.Close() // its iterators' errors are the corruption's
	s.getMu.Unlock()
	// The worker first: its flushes kick the merger, never the other way.
	s.mg.mu.Lock()
	s.mg.stopped = true
	s.mg.mu.Unlock()
	s.mg.quit.Store(true)
	for _, w := range []*worker{s.w, s.mg.w, s.reads} {
		if w != nil && !w.drain(releaseTimeout) {
			return fmt.Errorf("statestore: %s: the store's goroutines did not end within %s; the directory stays locked until the process exits", s.dir, releaseTimeout)
		}
	}
	s.dropLiveRuns()
	if s.log != nil {
		_ = s.log.close()
		s.log = nil
	}
	if s.job != nil && s.job.log != nil {
		// The worker never ran the job (the store is fatal): its log is
		// still open. The drain above ended the worker.
		_ = s.job.log.close()
		s.job.log = nil
	}
	freeRegion(s.flushBuf)
	s.flushBuf = nil
	// Pebble reports the corruption again here (its failed compactions);
	// what matters is that it let go of the lock and its files.
	_ = db.Close()
	return nil
}
