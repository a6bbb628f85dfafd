package statestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
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

// fatalState records the first fatal error of one store. It exists before the
// Store does because Pebble may report a fatal error inside pebble.Open.
type fatalState struct {
	once sync.Once
	err  atomic.Pointer[error]
	dead chan struct{} // closed once err is set
	log  *slog.Logger
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

// fatalSignal is the panic value used to unwind a store goroutine out of
// Pebble after Fatalf. Store methods recover it; nothing else does.
type fatalSignal struct{ err error }

// storeFrames are how store goroutines appear in a stack trace: a Store
// method, or the goroutine of fatalState.await running one for it.
var storeFrames = [][]byte{
	[]byte(reflect.TypeFor[Store]().PkgPath() + ".(*Store)."),
	[]byte(reflect.TypeFor[Store]().PkgPath() + ".(*fatalState).await"),
}

// onStoreGoroutine reports whether the calling goroutine is running a Store
// method, i.e. Pebble called Fatalf synchronously on behalf of our caller
// rather than on one of its own background goroutines. Only the fatal path
// pays for the stack walk.
func onStoreGoroutine() bool {
	buf := make([]byte, 64<<10)
	buf = buf[:runtime.Stack(buf, false)]
	// The "created by" trailer names the function that started the
	// goroutine, not a frame of it.
	if i := bytes.Index(buf, []byte("\ncreated by ")); i >= 0 {
		buf = buf[:i]
	}
	for _, f := range storeFrames {
		if bytes.Contains(buf, f) {
			return true
		}
	}
	return false
}

// pebbleLogger adapts Pebble's Logger to slog and replaces its Fatalf.
//
// Pebble calls Fatalf when it cannot continue safely (a failed WAL or
// MANIFEST write, a broken invariant) and does not expect the call to return:
// after "fatal commit error" DB.Apply would return nil for a batch that was
// never written, and after a failed MANIFEST write the in-memory version no
// longer matches the disk. The default logger calls os.Exit. Ours records the
// error, so that Err and every later Store call report it, and then never
// returns to the Pebble code that called it:
//
//   - on a goroutine that runs a Store method it panics with fatalSignal,
//     which that method recovers and turns into its error; the store never
//     calls into Pebble again, so locks Pebble may hold while unwinding are
//     never contended;
//   - on one of Pebble's background goroutines (flush, compaction) it parks
//     the goroutine for the rest of the process, which is what os.Exit would
//     have done to it; whoever waits for that goroutine is released by the
//     store's own wait on the fatal state (see Store.await).
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
	err := l.fatal.set(errors.New(msg))
	if onStoreGoroutine() {
		panic(fatalSignal{err})
	}
	select {} // park this Pebble goroutine for good
}

// eventListener reports Pebble events that need an operator's attention and
// turns failed flushes and compactions into fatal errors. Pebble retries a
// failed flush forever; on a full or failing disk that means commits stall
// once the memtables are full, which is worse than stopping: the job restarts
// and recovers from the output topic instead.
func eventListener(log *slog.Logger, fatal *fatalState) *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			log.Error("statestore: pebble background error", "err", err)
		},
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err != nil && !isEmptyFlush(info.Err) {
				fatal.set(fmt.Errorf("flush failed: %w", info.Err))
			}
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err != nil && !errors.Is(info.Err, pebble.ErrCancelledCompaction) {
				fatal.set(fmt.Errorf("compaction failed: %w", info.Err))
			}
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			log.Warn("statestore: write stall", "reason", info.Reason)
		},
		WriteStallEnd: func() {
			log.Info("statestore: write stall ended")
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

// recover turns a fatalSignal panic into *errp. Other panics propagate.
// Use as: defer s.fatal.recover(&err).
func (f *fatalState) recover(errp *error) {
	if r := recover(); r != nil {
		sig, ok := r.(fatalSignal)
		if !ok {
			panic(r)
		}
		*errp = sig.err
	}
}

// await runs fn, which calls into Pebble's write path and may block there
// (write stalls, waiting for a flush or compaction), on its own goroutine and
// returns its error, or the fatal error as soon as one is recorded, whichever
// comes first. A goroutine left behind by a fatal error stays blocked; the
// process is expected to exit soon after.
//
// Any panic of fn is fatal: Pebble's commit pipeline panics on WAL write
// errors while holding its locks, so the DB cannot be used afterwards.
func (f *fatalState) await(fn func() error) error {
	if err := f.get(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				if sig, ok := r.(fatalSignal); ok {
					done <- sig.err
					return
				}
				done <- f.set(fmt.Errorf("pebble panic: %v", r))
			}
		}()
		done <- fn()
	}()
	select {
	case err := <-done:
		return err
	case <-f.dead:
		// Prefer fn's own result if it finished at the same moment.
		select {
		case err := <-done:
			return err
		default:
			return f.get()
		}
	}
}
