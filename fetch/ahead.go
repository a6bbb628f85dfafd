package fetch

import (
	"context"
	"runtime/pprof"
)

// ReadRangeAhead is ReadRange with the fetches running ahead of fn: a
// goroutine of its own fetches the next batches (up to ahead of them,
// ahead >= 1) while fn handles the current one, so that the round trip and
// the decoding of batch n+1 overlap fn's work on batch n. fn is called on
// the caller's goroutine, in offset order, with non-empty batches only,
// as ReadRange calls it. A restore, whose fn keys every record, reads this
// way (job.restoreOutput): with the read on the same goroutine as the
// keying, the fetch round trips were more than half of the reader's wall
// time (BenchmarkRestore).
//
// Each batch handed to fn, and its record slices, are valid only during
// the call: the batch is fetched into again afterwards. The Fetcher is
// used by the fetching goroutine until ReadRangeAhead returns (it waits
// for it), so it must not be touched from fn. On success the position is
// max(from, to) as after ReadRange. After an error (from fn, or a fetch
// error, returned as is) the position is wherever the fetches ahead
// stopped: up to ahead batches past the batch fn failed on.
func (f *Fetcher) ReadRangeAhead(ctx context.Context, from, to int64, ahead int, fn func(*Batch) error) error {
	if ahead < 1 {
		return f.errorf("read range ahead: ahead must be >= 1, got %d", ahead)
	}
	to, err := f.startRange(ctx, from, to)
	if err != nil {
		return err
	}
	if f.pos >= to {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make([]Batch, ahead+1)
	free := make(chan *Batch, len(batches))
	for i := range batches {
		free <- &batches[i]
	}
	// full carries the fetched batches in order, then at most one error;
	// it is closed when the fetching goroutine ends.
	type fetched struct {
		b   *Batch
		err error
	}
	full := make(chan fetched, len(batches))
	go func() {
		defer close(full)
		// The profiler label piece=fetch, added to those of ctx: the
		// fetches and decoding show apart from fn's work in a profile.
		pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("piece", "fetch")))
		for f.pos < to {
			var b *Batch
			select {
			case b = <-free:
			case <-ctx.Done():
				return
			}
			if err := f.Fetch(ctx, b); err != nil {
				full <- fetched{err: err}
				return
			}
			if f.pos > to {
				b.trimFrom(to)
				f.pos = to
				b.NextOffset = to
			}
			if len(b.Records) == 0 {
				free <- b
				continue
			}
			full <- fetched{b: b}
		}
	}()
	err = nil
	for x := range full {
		if err != nil {
			continue // draining: the goroutine ends at its next step
		}
		if x.err != nil {
			err = x.err
			continue
		}
		if err = fn(x.b); err != nil {
			cancel()
			continue
		}
		free <- x.b
	}
	return err
}
