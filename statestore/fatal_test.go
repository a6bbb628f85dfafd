package statestore

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/dedupstream/dedupstream/partition"
)

// errNoSpace is what the injector returns: a full disk.
var errNoSpace = fmt.Errorf("injected: %w", syscall.ENOSPC)

// injector fails file system operations at random once armed.
type injector struct {
	armed     atomic.Bool
	writeOnly bool
	oneIn     int
	mu        sync.Mutex
	rng       *rand.Rand
	injected  atomic.Int64
}

func (in *injector) String() string { return "random ENOSPC" }

func (in *injector) MaybeError(op errorfs.Op) error {
	if !in.armed.Load() || (in.writeOnly && op.Kind.ReadOrWrite() != errorfs.OpIsWrite) {
		return nil
	}
	in.mu.Lock()
	hit := in.rng.IntN(in.oneIn) == 0
	in.mu.Unlock()
	if !hit {
		return nil
	}
	in.injected.Add(1)
	return errNoSpace
}

// TestErrorInjection fails random file system operations under a running
// store. Whatever happens, the process neither exits nor panics, a fatal
// error is reported as one, and a reopen on the healthy file system recovers
// a consistent prefix that includes everything a successful Flush covered.
func TestErrorInjection(t *testing.T) {
	type variant struct {
		wal       bool
		writeOnly bool
		fromOpen  bool
		oneIn     int
	}
	var variants []variant
	for _, wal := range []bool{true, false} {
		variants = append(variants,
			variant{wal: wal, writeOnly: true, oneIn: 150},
			variant{wal: wal, writeOnly: true, oneIn: 1500},
			variant{wal: wal, writeOnly: false, oneIn: 400},
			variant{wal: wal, writeOnly: true, fromOpen: true, oneIn: 40},
		)
	}
	var fatals, failedOpens, readErrs, clean int
	seeds := soakSeeds(4)
	for _, v := range variants {
		for seed := uint64(1); seed <= seeds; seed++ {
			name := fmt.Sprintf("wal=%t/writeOnly=%t/fromOpen=%t/oneIn=%d/seed=%d", v.wal, v.writeOnly, v.fromOpen, v.oneIn, seed)
			t.Run(name, func(t *testing.T) {
				base := newCloneableMem()
				in := &injector{writeOnly: v.writeOnly, oneIn: v.oneIn, rng: rand.New(rand.NewPCG(seed, 99))}
				opts := testOptions(errorfs.Wrap(base, in))
				opts.VersionMode = true
				opts.DisableWAL = !v.wal
				opts.MemTableSize = 128 << 10
				w := &workload{rng: rand.New(rand.NewPCG(seed, 3)), h: newHistory()}
				in.armed.Store(v.fromOpen)
				s, err := Open("db", opts)
				var runErr error
				if err != nil {
					failedOpens++
					runErr = err
				} else {
					in.armed.Store(true)
					b := s.NewBatch()
					for w.committed < 300 && runErr == nil {
						runErr = w.step(s, b)
						if runErr == nil && w.committed > 1 {
							// Reads under injection may fail, but not fatally.
							i := 1 + w.rng.Uint64N(w.committed)
							if _, _, err := s.Get(w.h.commitGen[i], keyOf(i, 0)); err != nil {
								if errors.Is(err, ErrFatal) {
									runErr = err
								}
								readErrs++
							}
						}
					}
					if runErr == nil {
						runErr = s.Close()
						if runErr == nil {
							w.durable = w.committed
							clean++
						}
					} else {
						checkFatalReported(t, s, runErr)
						if errors.Is(runErr, ErrFatal) {
							fatals++
						} else {
							_ = s.Close()
						}
					}
				}
				// The crash: clone the healthy file system before disarming, so
				// that abandoned Pebble goroutines cannot change the clone.
				pc := []int{0, 50, 100}[seed%3]
				clone := base.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pc, RNG: rand.New(rand.NewPCG(seed, 5))})
				in.armed.Store(false)
				ropts := opts
				ropts.FS = nil
				checkRecovered(t, w.h, crashPoint{
					fs: clone, committed: w.committed, floors: w.floors, durable: w.durable,
					unsyncedPc: pc, inDoubt: runErr != nil,
				}, ropts)
				t.Logf("%d commits, %d injected errors, stopped by: %v", w.committed, in.injected.Load(), runErr)
			})
		}
	}
	t.Logf("runs: %d fatal, %d failed opens, %d clean; %d read errors", fatals, failedOpens, clean, readErrs)
	if fatals == 0 {
		t.Error("no run ended in a fatal error: the injection rates are too low to test the fatal path")
	}
}

// checkFatalReported checks how a store reports the error that stopped a run.
func checkFatalReported(t *testing.T, s *Store, runErr error) {
	t.Helper()
	if !errors.Is(runErr, ErrFatal) {
		// A plain error from Pebble: the store remains usable or turns fatal.
		return
	}
	if s.Err() == nil {
		t.Fatalf("call failed with %v but Err() is nil", runErr)
	}
	if runErr.Error() != s.Err().Error() && !strings.HasPrefix(runErr.Error(), "statestore: open ") {
		t.Fatalf("call failed with %q, want the plain fatal error %q", runErr, s.Err())
	}
	if !strings.HasPrefix(s.Err().Error(), "statestore: fatal: ") {
		t.Fatalf("Err() = %q, want a statestore: fatal: prefix", s.Err())
	}
	if errors.Is(runErr, ErrCorrupt) {
		// The job would rebuild the store: a full disk is no reason to.
		t.Fatalf("call failed with %q, which matches ErrCorrupt: only corruption may", runErr)
	}
	b := s.NewBatch()
	b.Put(1, keyOf(1, 1), 1)
	_, cerr := s.Commit(b, State{})
	_, _, gerr := s.Get(1, keyOf(1, 1))
	for _, err := range []error{cerr, gerr, s.Flush(), s.Expire(1 << 40), s.Compact(), s.ScanGeneration(1, nil)} {
		if err == nil || err.Error() != s.Err().Error() {
			t.Fatalf("call after fatal error returned %v, want %v", err, s.Err())
		}
	}
	if _, err := s.Generations(); !errors.Is(err, ErrFatal) {
		t.Fatalf("Generations after fatal error: %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrFatal) {
		t.Fatalf("Close after fatal error = %v, want the fatal error", err)
	}
}

// TestFatalf exercises the fatal-error paths directly, without Pebble.
func TestFatalf(t *testing.T) {
	newLogger := func() pebbleLogger {
		return pebbleLogger{log: slog.New(slog.DiscardHandler), fatal: newFatalState(slog.New(slog.DiscardHandler))}
	}
	const want = "statestore: fatal: pebble: MANIFEST sync failed: injected: no space left on device"

	t.Run("background goroutine parks", func(t *testing.T) {
		l := newLogger()
		returned := make(chan struct{})
		go func() { // stands for a Pebble flush or compaction goroutine
			l.Fatalf("MANIFEST sync failed: %v", errNoSpace)
			close(returned)
		}()
		select {
		case <-l.fatal.dead:
		case <-time.After(10 * time.Second):
			t.Fatal("Fatalf did not record the error")
		}
		select {
		case <-returned:
			t.Fatal("Fatalf returned to Pebble")
		case <-time.After(50 * time.Millisecond):
		}
		if err := l.fatal.get(); err == nil || err.Error() != want || !errors.Is(err, ErrFatal) {
			t.Fatalf("fatal error = %v, want %q", err, want)
		}
	})
	t.Run("worker call returns the fatal error", func(t *testing.T) {
		l := newLogger()
		w := startWorker(l.fatal)
		err := w.do(func() error {
			l.Fatalf("pebble: MANIFEST sync failed: %v", errNoSpace)
			return errors.New("Fatalf returned")
		})
		if err == nil || err.Error() != want {
			t.Fatalf("do = %v, want %q", err, want)
		}
		// Later calls fail at once.
		if err := w.do(func() error { return nil }); err == nil || err.Error() != want {
			t.Fatalf("do after fatal = %v", err)
		}
		if w.post(func() {}) {
			t.Fatal("post after fatal queued a task")
		}
	})
	t.Run("panic in a write is fatal", func(t *testing.T) {
		l := newLogger()
		err := startWorker(l.fatal).do(func() error { panic(errNoSpace) })
		if !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "pebble panic: injected") {
			t.Fatalf("do = %v", err)
		}
	})
	t.Run("blocked write is released", func(t *testing.T) {
		l := newLogger()
		w := startWorker(l.fatal)
		done := make(chan error, 1)
		go func() { done <- w.do(func() error { select {} }) }() // a stalled commit
		time.Sleep(10 * time.Millisecond)
		go l.Fatalf("MANIFEST sync failed: %v", errNoSpace) // a Pebble goroutine
		select {
		case err := <-done:
			if err == nil || err.Error() != want {
				t.Fatalf("do = %v, want %q", err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a call blocked in Pebble was not released by the fatal error")
		}
	})
	t.Run("guardFS parks the writer", func(t *testing.T) {
		f := newFatalState(slog.New(slog.DiscardHandler))
		in := &injector{writeOnly: true, oneIn: 1, rng: rand.New(rand.NewPCG(1, 1))}
		fs := guardFS{FS: errorfs.Wrap(vfs.NewMem(), in), fatal: f}
		file, err := fs.Create("f", vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		in.armed.Store(true)
		err = startWorker(f).do(func() error {
			_, err := file.Write([]byte("x"))
			return fmt.Errorf("Write returned %v to Pebble", err)
		})
		if err == nil || !strings.HasPrefix(err.Error(), "statestore: fatal: write f: injected") {
			t.Fatalf("do = %v", err)
		}
	})
}

// within runs fn and returns its error, failing the test if fn does not
// return within a generous bound: a call parked in Pebble never does.
func within(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not return: its goroutine is parked or blocked in Pebble", what)
		return nil
	}
}

// checkFatalCall checks that a call failed with the store's fatal error and
// that the error is the planted one.
func checkFatalCall(t *testing.T, s *Store, what string, err error, planted string) {
	t.Helper()
	if !errors.Is(err, ErrFatal) {
		t.Fatalf("%s = %v, want an error matching ErrFatal", what, err)
	}
	if s.Err() == nil || err.Error() != s.Err().Error() {
		t.Fatalf("%s = %q, want the store's fatal error %v", what, err, s.Err())
	}
	if !strings.Contains(err.Error(), planted) {
		t.Fatalf("%s = %q, want the planted error %q", what, err, planted)
	}
	// Only corruption may match ErrCorrupt (the job rebuilds such a store).
	if want := planted == "data corruption" || planted == "checksum mismatch"; errors.Is(err, ErrCorrupt) != want {
		t.Fatalf("%s = %q: matches ErrCorrupt %v, want %v", what, err, !want, want)
	}
}

// plantFatalf makes the Pebble event hook set by hook call Fatalf, the way
// Pebble's own code does, once armed.
func plantFatalf(armed *atomic.Bool, hook func(el *pebble.EventListener, fatalf func())) func(*pebble.Options) {
	return func(po *pebble.Options) {
		lg := po.Logger
		hook(po.EventListener, func() {
			if armed.Load() {
				lg.Fatalf("planted Fatalf")
			}
		})
	}
}

// TestFatalfOnWritePath: Pebble calls Fatalf synchronously inside a
// write-path call of a Store method (here in DB.Ingest, from the flusher).
// The method returns the fatal error; it does not hang and Fatalf does not
// return into Pebble.
func TestFatalfOnWritePath(t *testing.T) {
	for _, c := range []struct {
		name string
		wal  bool
		call func(s *Store) error
	}{
		{"Flush", false, func(s *Store) error { return s.Flush() }},
		{"Compact", true, func(s *Store) error { return s.Compact() }},
		{"Close", true, func(s *Store) error { return s.Close() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var armed atomic.Bool
			opts := testOptions(vfs.NewMem())
			opts.DisableWAL = !c.wal
			opts.tune = plantFatalf(&armed, func(el *pebble.EventListener, fatalf func()) {
				el.TableIngested = func(pebble.TableIngestInfo) { fatalf() }
			})
			s := mustOpen(t, "db", opts)
			b := s.NewBatch()
			for i := range uint64(1000) {
				b.Put(1, keyOf(1, i), i)
			}
			if _, err := s.Commit(b, State{}); err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			err := within(t, c.name, func() error { return c.call(s) })
			checkFatalCall(t, s, c.name, err, "planted Fatalf")
			if _, err := s.Commit(b, State{}); !errors.Is(err, ErrFatal) {
				t.Fatalf("Commit after the fatal error = %v", err)
			}
		})
	}
}

// TestFatalfOnPebbleGoroutine: Pebble calls Fatalf on one of its own
// goroutines (the flush that Compact waits for, or the compaction) while a
// Store call waits for it and a Commit waits behind that call. Both return
// the fatal error.
func TestFatalfOnPebbleGoroutine(t *testing.T) {
	var armed atomic.Bool
	entered, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	opts := testOptions(vfs.NewMem())
	opts.tune = plantFatalf(&armed, func(el *pebble.EventListener, fatalf func()) {
		hold := func() {
			if armed.Load() {
				once.Do(func() { close(entered) })
				<-proceed
			}
			fatalf()
		}
		el.FlushBegin = func(pebble.FlushInfo) { hold() }
		el.CompactionBegin = func(pebble.CompactionInfo) { hold() }
	})
	s := mustOpen(t, "db", opts)
	b := s.NewBatch()
	for g := uint64(1); g <= 2; g++ {
		for i := range uint64(1000) {
			b.Put(g, keyOf(g, i), i)
		}
		if _, err := s.Commit(b, State{Generation: g}); err != nil {
			t.Fatal(err)
		}
	}
	writeRuns(t, s)
	// The floor's range deletion sits in Pebble's memtable: Compact makes
	// Pebble flush it on a goroutine of its own first.
	if err := s.Expire(2); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	compacted := make(chan error, 1)
	go func() { compacted <- s.Compact() }()
	select {
	case <-entered:
	case <-time.After(60 * time.Second):
		t.Fatal("Compact started no flush or compaction in Pebble")
	}
	committed := make(chan error, 1)
	go func() {
		b.Put(2, keyOf(2, 5000), 0)
		_, err := s.Commit(b, State{Generation: 2})
		committed <- err
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-committed:
		t.Fatalf("Commit returned %v while Compact held the store", err)
	default:
	}
	close(proceed) // the Pebble goroutine calls Fatalf now
	for _, c := range []struct {
		what string
		ch   chan error
	}{{"Compact", compacted}, {"the waiting Commit", committed}} {
		err := within(t, c.what, func() error { return <-c.ch })
		checkFatalCall(t, s, c.what, err, "planted Fatalf")
	}
}

// sstReadFS hands out sstables whose reads, once armed, call onRead first
// and then return what it returns (corrupt data, or nothing at all).
type sstReadFS struct {
	vfs.FS
	armed  atomic.Bool
	onRead func(p []byte)
}

func (fs *sstReadFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil || !strings.HasSuffix(name, ".sst") {
		return f, err
	}
	return sstReadFile{File: f, fs: fs}, nil
}

type sstReadFile struct {
	vfs.File
	fs *sstReadFS
}

func (f sstReadFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if f.fs.armed.Load() {
		f.fs.onRead(p[:n])
	}
	return n, err
}

// readRuns fills a store with keys in runs and reopens it, so that its
// reads come from disk. It returns the reopened store.
func readRuns(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	opts := testOptions(fs)
	s := mustOpen(t, "db", opts)
	b := s.NewBatch()
	for i := range uint64(20000) {
		b.Put(1, keyOf(1, i), i)
	}
	if _, err := s.Commit(b, State{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	return mustOpen(t, "db", opts)
}

// TestReadCorruptionIsFatal: a read that finds a corrupt block returns the
// store's fatal error on the caller's goroutine. Pebble's default reaction,
// Fatalf from its DataCorruption event, would park the caller (the stage).
func TestReadCorruptionIsFatal(t *testing.T) {
	s, _, err := lookupCorrupt(t)
	checkFatalCall(t, s, "Lookup", err, "data corruption")
}

// lookupCorrupt writes runs, then looks their keys up while every byte the
// store reads of an sstable is garbled, and returns the store, its file
// system (armed garbles the reads again) and the first error a Lookup
// returned. Reads are sound again when it returns.
func lookupCorrupt(t *testing.T) (*Store, *sstReadFS, error) {
	fs := &sstReadFS{FS: vfs.NewMem(), onRead: func(p []byte) {
		for i := range p {
			p[i] ^= 0x5a
		}
	}}
	s := readRuns(t, fs)
	fs.armed.Store(true)
	defer fs.armed.Store(false)
	return s, fs, within(t, "Lookup of a corrupt run", func() error {
		for i := range uint64(20000) {
			if _, _, _, err := s.Lookup(keyOf(1, i), []uint64{1}); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestCorruptStoreReleases: a store fatal through corruption alone lets go
// of its directory on Close, so that the job can move the directory aside
// and open a new store at the same path in the same process (Pebble's lock
// is per path and process); a store fatal through a Fatalf keeps it.
func TestCorruptStoreReleases(t *testing.T) {
	s, fs, err := lookupCorrupt(t)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Lookup of a corrupt run = %v, want an error matching ErrCorrupt", err)
	}
	if err := within(t, "Close of a corrupt store", s.Close); !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrFatal) {
		t.Fatalf("Close of a corrupt store = %v, want the fatal corruption", err)
	}
	// The reads are clean again: the same directory opens and answers.
	s = mustOpen(t, "db", testOptions(fs))
	keys := make([]partition.Hash, 20000)
	for i := range keys {
		keys[i] = keyOf(1, uint64(i))
	}
	mustHoldExactly(t, s, 1, keys, "after the reopen")
	mustClose(t, s)

	// Corruption met inside Open (by pebble.Open's own reads in race
	// builds, else by the load of the metadata) fails it and leaves the
	// directory unlocked too.
	fs.armed.Store(true)
	_, err = Open("db", testOptions(fs))
	fs.armed.Store(false)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of a corrupt store = %v, want an error matching ErrCorrupt", err)
	}
	s = mustOpen(t, "db", testOptions(fs))
	mustHoldExactly(t, s, 1, keys, "after the failed open")
	mustClose(t, s)

	// A Fatalf may have parked a goroutine holding Pebble's locks: the
	// store stays open, and so does its lock.
	var lg pebble.Logger
	s = mustOpen(t, "db", testOptions(fs))
	lg = s.po.Logger
	go lg.Fatalf("planted Fatalf")
	if err := within(t, "Close after a Fatalf", func() error {
		<-s.fatal.dead
		return s.Close()
	}); errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrFatal) {
		t.Fatalf("Close after a Fatalf = %v, want the fatal error, not corruption", err)
	}
	if _, err := Open("db", testOptions(fs)); !errors.Is(err, ErrLocked) {
		t.Fatalf("Open after a Fatalf = %v, want ErrLocked: the parked store keeps its lock", err)
	}
}

// TestFatalfOnReadPath: in builds where Pebble compiles its read-path
// invariant checks in, a Fatalf inside a read (here from the file read under
// a Lookup, standing for a failed check in an iterator) makes the read
// return the fatal error instead of parking the caller.
func TestFatalfOnReadPath(t *testing.T) {
	if readOnCaller {
		t.Skip("reads run on the caller: Pebble's read path calls no Fatalf in this build (readpath.go); run with -race")
	}
	var lg pebble.Logger
	fs := &sstReadFS{FS: vfs.NewMem(), onRead: func([]byte) { lg.Fatalf("planted Fatalf") }}
	s := readRuns(t, fs)
	lg = s.po.Logger
	fs.armed.Store(true)
	err := within(t, "Lookup", func() error {
		for i := range uint64(20000) {
			if _, _, _, err := s.Lookup(keyOf(1, i), []uint64{1}); err != nil {
				return err
			}
		}
		return nil
	})
	checkFatalCall(t, s, "Lookup", err, "planted Fatalf")
}

// TestEmptyFlushText makes Pebble flush an empty memtable and checks that
// the event listener recognises the error Pebble reports for it: should
// Pebble change the text, every idle Close without WAL would turn fatal.
func TestEmptyFlushText(t *testing.T) {
	var errs []error
	opts := &pebble.Options{FS: vfs.NewMem(), DisableWAL: true, EventListener: &pebble.EventListener{
		FlushEnd: func(info pebble.FlushInfo) { errs = append(errs, info.Err) },
	}}
	db, err := pebble.Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 1 || errs[0] == nil {
		t.Fatalf("flush of an empty memtable reported %v, want one error", errs)
	}
	if !isEmptyFlush(errs[0]) {
		t.Fatalf("Pebble reported the empty flush as %q; isEmptyFlush expects %q", errs[0], emptyFlushText)
	}
	// A real failure is not mistaken for it.
	if isEmptyFlush(errNoSpace) {
		t.Fatalf("isEmptyFlush(%v) = true", errNoSpace)
	}
}
