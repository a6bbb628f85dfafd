package statestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// ErrFatal is wrapped by every error returned after Pebble reported a fatal
// error (see "Fatal errors" in the package documentation). The store is then
// unusable; the job should stop and restart, and recovery re-reads the output
// topic from the last durable checkpoint.
var ErrFatal = errors.New("statestore: fatal")

// ErrCorrupt is matched by the errors of a store whose files fail the
// store's or Pebble's own checks: a block failing its checksum or not
// decoding, a torn or garbled sstable, a MANIFEST Pebble cannot read, a
// state, run registry or commit record that does not decode. Such a store
// is fatal too (ErrFatal), and its directory will fail the same way at
// every restart; the job treats it as a cache to rebuild from the output
// topic (state.on_corruption). Faults of the environment (ENOSPC, EIO, a
// permission denied) do not match it: they may pass, the files may not.
var ErrCorrupt = errors.New("statestore: corrupt")

// corruptError marks a cause as corruption (ErrCorrupt) and reads as the
// cause alone, which names the file.
type corruptError struct{ err error }

func (e *corruptError) Error() string        { return e.err.Error() }
func (e *corruptError) Unwrap() error        { return e.err }
func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }

// corruptf is a corruption error (see ErrCorrupt).
func corruptf(format string, args ...any) error {
	return &corruptError{fmt.Errorf(format, args...)}
}

// markCorrupt marks err as corruption when Pebble says it is one
// (pebble.ErrCorruption: a checksum mismatch, a malformed MANIFEST or
// table); it returns any other error as it is.
func markCorrupt(err error) error {
	if err == nil || errors.Is(err, ErrCorrupt) || !errors.Is(err, pebble.ErrCorruption) {
		return err
	}
	return &corruptError{err}
}

// fatalState records the first fatal error of one store. It exists before the
// Store does because Pebble may report a fatal error inside pebble.Open.
type fatalState struct {
	once sync.Once
	err  atomic.Pointer[error]
	dead chan struct{} // closed once err is set
	log  *slog.Logger
	// parked is set once a goroutine was parked for good (park): a
	// Fatalf, a write error, a panic on a worker. Until then the store's
	// goroutines still run, and a store fatal through corruption alone
	// can be closed (Store.release).
	parked atomic.Bool
}

func newFatalState(log *slog.Logger) *fatalState {
	return &fatalState{dead: make(chan struct{}), log: log}
}

// set records cause as the fatal error unless one is already recorded, and
// returns the recorded error.
func (f *fatalState) set(cause error) error {
	f.once.Do(func() {
		err := fmt.Errorf("%w: %w", ErrFatal, cause)
		f.err.Store(&err)
		f.log.Error("statestore: fatal error; the store refuses further use", "err", cause)
		close(f.dead)
	})
	return *f.err.Load()
}

// park records that the calling goroutine stops here for good, and stops
// it: the store can no longer be closed (see parked).
func (f *fatalState) park() {
	f.parked.Store(true)
	select {}
}

// releasable reports whether the store is fatal through corruption alone,
// with none of its goroutines parked (see Store.release).
func (f *fatalState) releasable() bool {
	return errors.Is(f.get(), ErrCorrupt) && !f.parked.Load()
}

// get returns the fatal error or nil.
func (f *fatalState) get() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// wrapErr adds context to err, except to a fatal error, which every call
// reports in the same plain "statestore: fatal: ..." form.
func wrapErr(err error, format string, args ...any) error {
	if err == nil || errors.Is(err, ErrFatal) {
		return err
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// pebbleLogger adapts Pebble's Logger to slog and replaces its Fatalf.
//
// Pebble calls Fatalf when it cannot continue safely (a failed WAL or
// MANIFEST write, a broken invariant) and does not expect the call to return:
// after "fatal commit error" DB.Apply would return nil for a batch that was
// never written, and after a failed MANIFEST write the in-memory version no
// longer matches the disk. The default logger calls os.Exit. Ours records the
// error, so that Err and every later Store call report it, and then parks
// the calling goroutine for the rest of the process, which is what os.Exit
// would have done to it, whichever goroutine that is:
//
//   - the store's worker (every write-path call: Open, the flusher, Compact,
//     Close; see worker): the Store call waiting for it returns the fatal
//     error, because it waits on the fatal state too;
//   - one of Pebble's background goroutines (flush, compaction, table
//     stats): whoever waits for it, the worker included, stays blocked and
//     the Store call waiting for the worker returns the fatal error;
//   - a reader's goroutine: only in builds where Pebble compiles its
//     read-path invariant checks in, and there reads run on a goroutine of
//     the store too (see readOnCaller).
//
// Earlier versions told a store goroutine from a Pebble one by parsing
// runtime.Stack for frames of Store methods and then unwound the former with
// a panic. That broke silently for any entry point without such a frame (a
// Fatalf under Reader.Lookup, called by the stage directly, parked the
// stage) and cost a 64 KiB stack dump on the fatal path; parking everywhere
// needs no goroutine to be recognised.
//
// Of the ways to get there, the store takes the third:
//
//   - every Pebble call, reads included, on a goroutine of the store: a
//     hand-off per Lookup doubles its cost (BenchmarkReadHandoff, figures in
//     readpath.go) unless the stage batched its confirmations per batch,
//     which it does not (it decides record by record);
//   - an explicit marker instead of a goroutine: Go has no per-goroutine
//     state, and a per-store flag ("a Store call is inside Pebble") cannot
//     tell that call's goroutine from a Pebble goroutine that reaches Fatalf
//     at the same moment, so one of them would be unwound or parked wrongly;
//   - the write path on the worker, reads on the caller, and Fatalf kept off
//     the read path: Pebble's read-path Fatalf calls are invariant checks
//     compiled only into race and invariants builds, where reads are handed
//     to a read worker as well, and data corruption is handled by the
//     store's own listener (readpath.go).
type pebbleLogger struct {
	log   *slog.Logger
	fatal *fatalState
}

var _ pebble.Logger = pebbleLogger{}

func (l pebbleLogger) Infof(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelInfo) {
		l.log.Info(fmt.Sprintf(format, args...), "component", "pebble")
	}
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelError) {
		l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
	}
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !strings.HasPrefix(msg, "pebble") {
		msg = "pebble: " + msg
	}
	l.fatal.set(errors.New(msg))
	l.fatal.park() // never return to Pebble
}

// eventListener reports Pebble events that need an operator's attention and
// turns failed flushes and compactions into fatal errors. Pebble retries a
// failed flush forever; on a full or failing disk that means commits stall
// once the memtables are full, which is worse than stopping: the job restarts
// and recovers from the output topic instead.
func eventListener(log *slog.Logger, fatal *fatalState) *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			if fatal.get() != nil {
				// The store is done for and said why once; Pebble's
				// table stats and compactions meet the same corrupt
				// table over and over until Close (dozens of lines,
				// each with a stack trace).
				return
			}
			log.Error("statestore: pebble background error", "err", err)
		},
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err != nil && !isEmptyFlush(info.Err) {
				fatal.set(markCorrupt(fmt.Errorf("flush failed: %w", info.Err)))
			}
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err != nil && !errors.Is(info.Err, pebble.ErrCancelledCompaction) {
				fatal.set(markCorrupt(fmt.Errorf("compaction failed: %w", info.Err)))
			}
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			log.Warn("statestore: write stall", "reason", info.Reason)
		},
		WriteStallEnd: func() {
			log.Info("statestore: write stall ended")
		},
		// Without a listener of its own Pebble calls Fatalf on data
		// corruption (EventListener.EnsureDefaults), on whatever goroutine
		// read the block: a reader's in production builds, which Fatalf
		// would park. Recorded here instead, the read returns Pebble's
		// corruption error and the store reports the fatal error from
		// then on (see readErr).
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			fatal.set(corruptf("data corruption in %s: %w", info.Path, info.Details))
		},
		DiskSlow: func(info pebble.DiskSlowInfo) {
			log.Warn("statestore: disk slow", "path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
		},
	}
}

// emptyFlushText is the text of the error Pebble's DB.flush1 (compaction.go)
// puts into FlushInfo.Err when a flush wrote no sstable: every flush of an
// empty memtable, e.g. DB.Flush or DB.Close of an idle store without WAL. It
// is not a failure. Pebble keeps the error in an unexported variable
// (errEmptyTable), so the text is the only way to tell it apart;
// TestEmptyFlushText makes Pebble produce it and fails if the text changes.
const emptyFlushText = "pebble: empty table"

// isEmptyFlush reports whether err, from FlushInfo.Err, only says that the
// flush had nothing to write.
func isEmptyFlush(err error) bool { return err.Error() == emptyFlushText }
