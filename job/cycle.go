package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/internal/backoff"
)

// task is one transactional worker the cycle driver runs: a stage (runner)
// or a route step (router). A cycle is one transaction: begin, then fetch,
// decide and produce batches until the cycle is full or old enough, then
// settle. Any error of a step aborts the transaction; the driver then
// classifies it and, when transient, backs off and recovers again.
type task interface {
	// recover fences the task's previous owner, settles its transaction
	// and positions the input at the committed offsets.
	recover(ctx context.Context) error
	// begin opens a cycle's transaction and notes where its input starts.
	begin() error
	// fetch reads the batch of the given turn (the task picks the source;
	// a stage with several raw topics takes them in turn). Its error
	// names the partition it read.
	fetch(ctx context.Context, turn int) (*fetch.Batch, error)
	// decide works out what the non-empty batch of that turn becomes and
	// adds its counts to cycle.
	decide(turn int, b *fetch.Batch, cycle *Stats) error
	// produce sends what decide made into the open transaction.
	produce(ctx context.Context) error
	// settle ends the cycle: its input offsets and EndTxn(commit), then
	// its counts. On failure it aborts the transaction itself and returns
	// the error to classify.
	settle(ctx context.Context, cycle *Stats) error
	// abort ends the open transaction without effect and returns cause,
	// or the fencing the abort ran into.
	abort(ctx context.Context, cause error) error
}

// driver runs a task: the supervisor (recover, run cycles, classify the
// failure, back off) and the cycle loop, the same for stages and route
// steps.
type driver struct {
	name       string        // error prefix: "partition 3", "route raw/2"
	fencedHint string        // what a fencing means for this task
	log        *slog.Logger  //
	maxRecords int           // commit.max_records: records per cycle
	interval   time.Duration // commit.interval: the longest a cycle reads
	shutdown   time.Duration // Options.ShutdownTimeout: bound on the last cycle's settle
	backoff    backoff.Backoff

	// Optional hooks of the supervisor.
	ready  func(bool)                // the task is (not) running cycles
	onStop func(ctx context.Context) // ctx ended: last words before returning nil
	// onFenced decides about a fencing (fenced.go): nil to recover in
	// place, or the error to stop with. Unset: stop with fencedHint.
	onFenced func(ctx context.Context, err error) error
	// onCorrupt decides about a corrupt store (corrupt.go): nil to
	// recover with the store it put in its place, or the error to stop
	// with. Unset: stop with the corruption.
	onCorrupt func(err error) error
}

// newDriver is a driver with the job's commit limits, backoff and
// shutdown timeout.
func (j *Job) newDriver(name, fencedHint string, log *slog.Logger) *driver {
	return &driver{
		name:       name,
		fencedHint: fencedHint,
		log:        log,
		maxRecords: j.cfg.Commit.MaxRecords,
		interval:   j.cfg.Commit.Interval,
		shutdown:   j.opts.ShutdownTimeout,
		backoff:    backoff.Backoff{Base: j.opts.Backoff, Limit: j.opts.MaxBackoff},
	}
}

func (d *driver) setReady(ready bool) {
	if d.ready != nil {
		d.ready(ready)
	}
}

// run alternates recovery and cycles until ctx ends (nil) or a failure is
// not transient (that failure, prefixed with d.name).
func (d *driver) run(ctx context.Context, t task) error {
	defer d.setReady(false)
	for {
		err := t.recover(ctx)
		if err == nil {
			d.setReady(true)
			err = d.cycles(ctx, t)
			d.setReady(false)
		}
		if err == nil {
			return nil
		}
		k := classify(err)
		switch {
		case k == fenced && d.onFenced != nil:
			if err := d.onFenced(ctx, err); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
			continue // take the id back and recover
		case k == fenced:
			return fmt.Errorf("%s: fenced: %s: %w", d.name, d.fencedHint, err)
		case k == corrupt && d.onCorrupt != nil:
			// The cycle that met it was aborted (or had committed: the
			// output holds it); the recovery restores the new store.
			if err := d.onCorrupt(err); err != nil {
				return fmt.Errorf("%s: %w", d.name, err)
			}
			continue
		case k == corrupt:
			return fmt.Errorf("%s: %w", d.name, err)
		case ctx.Err() != nil && (k == transient || errors.Is(err, context.Canceled)):
			if d.onStop != nil {
				d.onStop(ctx)
			}
			return nil
		case k == fatal:
			return fmt.Errorf("%s: %w", d.name, err)
		}
		d.log.Warn("transient failure: aborted the cycle, recovering after backoff", "err", err)
		if d.backoff.Sleep(ctx) != nil {
			return nil
		}
	}
}

// cycles runs cycles until ctx ends (then the open cycle is settled) or an
// error occurs (then it is aborted).
func (d *driver) cycles(ctx context.Context, t task) error {
	for ctx.Err() == nil {
		stopping, err := d.cycle(ctx, t)
		if err != nil {
			return err
		}
		d.backoff.Reset()
		if stopping {
			return nil
		}
	}
	return nil
}

// cycle runs one transaction. A cycle under way when ctx ends is settled
// anyway, within the shutdown timeout; stopping then reports it.
func (d *driver) cycle(ctx context.Context, t task) (stopping bool, err error) {
	txCtx := context.WithoutCancel(ctx) // a started cycle finishes on shutdown
	if err := t.begin(); err != nil {
		return false, t.abort(txCtx, err)
	}
	var (
		cycle Stats
		read  int
		start = time.Now()
	)
	for turn := 0; read < d.maxRecords && time.Since(start) < d.interval; turn++ {
		b, err := t.fetch(ctx, turn)
		if err != nil {
			if ctx.Err() != nil {
				stopping = true
				break
			}
			return false, t.abort(txCtx, err)
		}
		if len(b.Records) == 0 {
			continue
		}
		read += len(b.Records)
		if err := t.decide(turn, b, &cycle); err != nil {
			return false, t.abort(txCtx, err)
		}
		if err := t.produce(txCtx); err != nil {
			return false, t.abort(txCtx, err)
		}
	}
	if stopping {
		var cancel context.CancelFunc
		txCtx, cancel = context.WithTimeout(txCtx, d.shutdown)
		defer cancel()
	}
	return stopping, t.settle(txCtx, &cycle)
}
