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

	"github.com/cockroachdb/pebble/v2"
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
	db        *pebble.DB
	opts      Options
	fatal     *fatalState
	writeOpts *pebble.WriteOptions
	readers   sync.Pool // *reader for Get and Lookup

	closed atomic.Bool

	wmu      sync.Mutex // serialises writers and Close
	stateBuf []byte     // encoded State, reused by Commit (under wmu)

	mu    sync.Mutex // guards state and floor for readers
	state State
	floor uint64 // every bucket < floor has been expired
}

// Open opens the store in dir, creating it if needed. dir may be a mount
// point: Pebble's files live in the subdirectory dir/db.
func Open(dir string, opts Options) (*Store, error) {
	opts.applyDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	fatal := newFatalState(opts.Logger)
	cache, release := opts.blockCache()
	defer release() // each DB holds its own reference
	po := opts.pebbleOptions(cache, fatal)
	dbDir := opts.FS.PathJoin(dir, "db")
	if opts.ReadOnly {
		po.ReadOnly = true
		if _, err := opts.FS.Stat(dbDir); err != nil {
			return nil, fmt.Errorf("%w in %s: %w", ErrNotExist, dir, err)
		}
	} else if err := createIfMissing(dbDir, &opts, po, fatal); err != nil {
		return nil, fmt.Errorf("statestore: create %s: %w", dbDir, err)
	}
	// Never let Pebble create a store in place: see createIfMissing.
	po.ErrorIfNotExists = true
	var db *pebble.DB
	err := fatal.await(func() (err error) {
		db, err = pebble.Open(dbDir, po)
		return err
	})
	if err != nil {
		if isLockError(err) {
			return nil, fmt.Errorf("%w: %s: %w", ErrLocked, dbDir, err)
		}
		return nil, fmt.Errorf("statestore: open %s: %w", dbDir, err)
	}
	s := &Store{
		db:    db,
		opts:  opts,
		fatal: fatal,
		// Durability is relaxed on purpose: the store is a cache of the
		// committed output topic. Flush syncs on demand ("Crash semantics").
		writeOpts: pebble.NoSync,
		readers:   sync.Pool{New: newReader},
	}
	if err := s.load(); err != nil {
		if cerr := s.Close(); cerr != nil && !errors.Is(err, ErrFatal) {
			err = errors.Join(err, cerr)
		}
		return nil, fmt.Errorf("statestore: open %s: %w", dbDir, err)
	}
	return s, nil
}

// createIfMissing creates an empty Pebble store in dbDir atomically: in a
// sibling directory first, renamed into place once complete. Pebble creating
// a DB in place and crashing before its directory entries are synced can
// leave a MANIFEST marker without the MANIFEST, which it then refuses to
// open; the error-injection test hit exactly that. A leftover of a crashed
// creation is removed.
func createIfMissing(dbDir string, opts *Options, po *pebble.Options, fatal *fatalState) error {
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
	if err := fatal.await(func() error {
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

// load reads the metadata: format, state and floor.
func (s *Store) load() (err error) {
	defer s.fatal.recover(&err)
	want := formatRecord(s.opts.VersionMode)
	v, ok, err := s.getMeta(metaFormatKey)
	switch {
	case err != nil:
		return err
	case !ok:
		return errors.New("statestore: no format record: not a statestore")
	case len(v) != 2 || v[0] != layoutVersion:
		return fmt.Errorf("statestore: unsupported layout %x (this build writes %x)", v, want)
	case s.opts.ReadOnly:
		s.opts.VersionMode = v[1]&formatFlagVersionMode != 0
	case v[1] != want[1]:
		return fmt.Errorf("statestore: store was created with VersionMode=%t, opened with VersionMode=%t",
			v[1]&formatFlagVersionMode != 0, s.opts.VersionMode)
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
			return fmt.Errorf("statestore: corrupt expiry floor %x", v)
		}
		s.floor = binary.BigEndian.Uint64(v)
	}
	return nil
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

// reader is the per-call state of Get and Lookup, pooled so that reads do
// not allocate.
type reader struct {
	key  [bucketKeyLen]byte
	opts pebble.IterOptions
	// Pebble appends one filter to PointKeyFilters for every sstable it
	// opens; with room for it here that append does not allocate.
	filters [1]pebble.BlockPropertyFilter
}

func newReader() any {
	r := &reader{}
	// Pebble's DB.Get never consults the Bloom filters of the last level,
	// which holds ~90 % of the keys, so a miss reads a data block there. A
	// prefix seek with UseL6Filters checks them; most misses then end at the
	// filter (see "Pebble options" in the package documentation).
	r.opts.UseL6Filters = true
	return r
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

// lookup probes gens in order through a Reader of its own.
func (s *Store) lookup(h partition.Hash, gens []uint64) (gen, version uint64, found bool, err error) {
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

// ScanGeneration calls fn for every key of bucket gen, in hash order, until
// fn returns an error, which ScanGeneration then returns. It reads a
// consistent snapshot and serves the Bloom rebuild after a restart.
func (s *Store) ScanGeneration(gen uint64, fn func(h partition.Hash, version uint64) error) (err error) {
	if err := s.usable(); err != nil {
		return err
	}
	defer s.fatal.recover(&err)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: genStart(gen), UpperBound: genEnd(gen)})
	if err != nil {
		return fmt.Errorf("statestore: scan generation %d: %w", gen, err)
	}
	defer func() {
		if cerr := it.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("statestore: scan generation %d: %w", gen, cerr)
		}
	}()
	for ok := it.First(); ok; ok = it.Next() {
		_, h, ok := parseBucketKey(it.Key())
		if !ok {
			return fmt.Errorf("statestore: scan generation %d: corrupt key %x", gen, it.Key())
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("statestore: scan generation %d: %w", gen, err)
		}
		version, err := decodeVersion(v)
		if err != nil {
			return err
		}
		if err := fn(h, version); err != nil {
			return err
		}
	}
	return nil
}

// Flush makes every successful Commit and Expire so far durable against a
// machine crash: with the WAL it syncs the WAL, without it flushes the
// memtable to an sstable. The stage need not call it (recovery re-reads the
// output topic); it bounds how much a crash can take back.
func (s *Store) Flush() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	return wrapErr(s.fatal.await(s.flush), "statestore: flush")
}

// flush runs on an await goroutine.
func (s *Store) flush() error {
	if !s.opts.DisableWAL {
		return s.db.LogData(nil, pebble.Sync)
	}
	return s.db.Flush()
}

// Close flushes the memtable when the WAL is off (Pebble would drop it
// otherwise), then closes Pebble. After a fatal error it returns that error
// and leaves Pebble as it is: its goroutines may be parked holding locks, and
// the process should exit. A second Close returns ErrClosed.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Swap(true) {
		return ErrClosed
	}
	if err := s.fatal.get(); err != nil {
		return err
	}
	var ferr error
	if s.opts.DisableWAL {
		ferr = s.fatal.await(s.db.Flush)
		if errors.Is(ferr, ErrFatal) {
			return ferr
		}
	}
	if err := s.fatal.await(s.db.Close); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}
