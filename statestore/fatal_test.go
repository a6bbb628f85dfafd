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
				base := vfs.NewCrashableMem()
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
	t.Run("store goroutine unwinds", func(t *testing.T) {
		l := newLogger()
		err := l.fatal.await(func() error {
			l.Fatalf("pebble: MANIFEST sync failed: %v", errNoSpace)
			return errors.New("Fatalf returned")
		})
		if err == nil || err.Error() != want {
			t.Fatalf("await = %v, want %q", err, want)
		}
		// Later calls fail at once.
		if err := l.fatal.await(func() error { return nil }); err == nil || err.Error() != want {
			t.Fatalf("await after fatal = %v", err)
		}
	})
	t.Run("panic in a write is fatal", func(t *testing.T) {
		l := newLogger()
		err := l.fatal.await(func() error { panic(errNoSpace) })
		if !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "pebble panic: injected") {
			t.Fatalf("await = %v", err)
		}
	})
	t.Run("blocked write is released", func(t *testing.T) {
		l := newLogger()
		done := make(chan error, 1)
		go func() { done <- l.fatal.await(func() error { select {} }) }() // a stalled commit
		time.Sleep(10 * time.Millisecond)
		go l.Fatalf("MANIFEST sync failed: %v", errNoSpace) // a Pebble goroutine
		select {
		case err := <-done:
			if err == nil || err.Error() != want {
				t.Fatalf("await = %v, want %q", err, want)
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
		err = f.await(func() error {
			_, err := file.Write([]byte("x"))
			return fmt.Errorf("Write returned %v to Pebble", err)
		})
		if err == nil || !strings.HasPrefix(err.Error(), "statestore: fatal: write f: injected") {
			t.Fatalf("await = %v", err)
		}
	})
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
