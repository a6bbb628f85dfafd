package statestore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// worker is a goroutine the store owns for as long as it is open. Every
// Pebble call on the write path runs on the store's worker: pebble.Open and
// the metadata reads and orphan clean-up of Open, the flusher's sstable
// writes, ingests and synced batches, merges, Compact and DB.Close. The
// caller of such a call waits for its result or for the store's fatal error,
// whichever comes first (do, awaitFlush).
//
// This is what lets Pebble's Logger.Fatalf treat every goroutine alike: it
// records the error and parks the goroutine that called it, for good (see
// pebbleLogger). On the worker that releases the waiting caller with the
// fatal error; on one of Pebble's own goroutines (flush, compaction) it is
// what os.Exit would have done to it, and whoever waits on that goroutine is
// released the same way. No goroutine has to be recognised, so several
// stores in one process, and a Fatalf on the worker at the same time as one
// on a Pebble goroutine, need no care: each store's logger records into its
// own fatal state, the first error wins, and both goroutines park.
//
// Reads are the exception (see readOnCaller): they stay on the caller's
// goroutine in production builds.
type worker struct {
	fatal *fatalState
	tasks chan func()
	done  chan struct{} // closed when the loop has ended
	once  sync.Once     // closes tasks

	mu    sync.Mutex // serialises do; Store methods hold wmu anyway
	reply chan error // do's result, reused: one do at a time
}

// startWorker starts a store's worker. The queue holds one task, so that the
// flush job Open's log replay hands over, while Open itself runs on the
// worker, does not block.
func startWorker(fatal *fatalState) *worker {
	w := &worker{fatal: fatal, tasks: make(chan func(), 1), done: make(chan struct{}), reply: make(chan error, 1)}
	go w.loop()
	return w
}

func (w *worker) loop() {
	defer close(w.done)
	for fn := range w.tasks {
		w.run(fn)
	}
}

// run runs one task. A panic is fatal and parks the worker like Fatalf:
// Pebble may panic while holding its locks (its commit pipeline does on WAL
// errors), so nothing may call into it again.
func (w *worker) run(fn func()) {
	defer func() {
		if r := recover(); r != nil {
			w.fatal.set(fmt.Errorf("pebble panic: %v", r))
			w.fatal.park()
		}
	}()
	fn()
}

// post queues fn on the worker without waiting for it. It reports false,
// without queueing, once the store is fatal: the worker may be parked.
func (w *worker) post(fn func()) bool {
	if w.fatal.get() != nil {
		return false
	}
	select {
	case w.tasks <- fn:
		return true
	case <-w.fatal.dead:
		return false
	}
}

// do runs fn on the worker, after the tasks queued before it, and returns
// its error, or the fatal error as soon as one is recorded. A fatal error
// leaves the worker parked (or blocked behind a parked Pebble goroutine) for
// the rest of the process, which is expected to exit soon after.
func (w *worker) do(fn func() error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.fatal.get(); err != nil {
		return err
	}
	if !w.post(func() { w.reply <- fn() }) {
		return w.fatal.get()
	}
	select {
	case err := <-w.reply:
		return err
	case <-w.fatal.dead:
		// Prefer fn's own result if it finished at the same moment.
		select {
		case err := <-w.reply:
			return err
		default:
			return w.fatal.get()
		}
	}
}

// stop ends the worker once its queued tasks are done and waits for it, or
// returns the fatal error as soon as one is recorded. Calling it again only
// waits again.
func (w *worker) stop() error {
	w.once.Do(func() { close(w.tasks) })
	select {
	case <-w.done:
		return nil
	case <-w.fatal.dead:
		return w.fatal.get()
	}
}

// drain ends the worker once its queued tasks are done and waits for it,
// up to d, also when the store is fatal: release uses it on a store fatal
// through corruption, whose worker is not parked. It reports whether the
// worker ended. Nothing is queued once the store is fatal (post).
func (w *worker) drain(d time.Duration) bool {
	w.once.Do(func() { close(w.tasks) })
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.done:
		return true
	case <-t.C:
		return false
	}
}

// merger runs the store's merges on a worker of their own. Flushes ran the
// merges they made due on the store's worker before the next flush could
// start, so a Commit that filled an index while a merge of eight leaves was
// running (seconds at 100M keys) waited for the rest of it at the handover
// (BenchmarkMergePolicy's stall-ms). Now a flush only kicks the merger, and the stage's
// commits wait at most for the previous index's own flush: on two cores the
// stage runs on one and the flusher and merger share the other.
//
// At most one merge runs at a time, and at most one pass of them is queued
// behind it (pending), so the merger never holds more than one run's worth
// of output sstables beyond the runs it merges. The two workers share the
// store's fatal state: a Fatalf or panic on the merger parks it like the
// worker, and whoever waits on it (Close, tests) gets the fatal error.
type merger struct {
	w       *worker
	mu      sync.Mutex  // orders kick against stop
	stopped bool        // under mu
	pending atomic.Bool // a pass is queued and has not started yet
	quit    atomic.Bool // a merge in progress gives up (set by stop)
}

// kick queues pass unless one is queued already or the merger stopped.
func (m *merger) kick(pass func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped || !m.pending.CompareAndSwap(false, true) {
		return
	}
	if !m.w.post(func() {
		m.pending.Store(false)
		pass()
	}) {
		m.pending.Store(false)
	}
}

// stop makes a merge in progress give up (its output is removed, its
// inputs stay: a later Open merges them again) and ends the merger, or
// returns the fatal error. Calling it again only waits again.
func (m *merger) stop() error {
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
	m.quit.Store(true)
	return m.w.stop()
}
