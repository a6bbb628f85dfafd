package statestore

import (
	"fmt"
	"sync"
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
			select {}
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
