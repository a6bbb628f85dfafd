package fetch

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go/protocol/listoffsets"
)

// Offsets is the offset range of a partition at one moment.
type Offsets struct {
	// Earliest is the log start offset: the first offset still stored.
	Earliest int64
	// Latest is the high watermark: one past the last replicated record.
	Latest int64
	// LastStable is the last stable offset: every transaction below it is
	// decided. A read_committed reader sees no record at or past it yet;
	// it equals Latest when no transaction is open.
	LastStable int64
}

// ListOffsets asks the partition leader for the partition's earliest,
// latest and last stable offsets, retrying like Fetch.
func (f *Fetcher) ListOffsets(ctx context.Context) (Offsets, error) {
	var offs Offsets
	err := f.retry(ctx, "list offsets", func() (err error) {
		offs, err = f.listOffsets(ctx)
		return err
	})
	return offs, err
}

// OffsetForTime returns the first offset whose record timestamp is at or
// after ms (Unix milliseconds), below the last stable offset; every record
// before it has an older timestamp. It returns -1 when no record is that
// new. It retries like Fetch.
func (f *Fetcher) OffsetForTime(ctx context.Context, ms int64) (int64, error) {
	if ms < 0 {
		return 0, f.errorf("offset for time: want a timestamp >= 0, got %d", ms)
	}
	var off int64
	err := f.retry(ctx, "list offsets", func() (err error) {
		if err = f.findLeader(ctx); err != nil {
			return err
		}
		off, err = f.listOffset(ctx, ms, isolationReadCommitted)
		return err
	})
	return off, err
}

// listOffsets runs the three ListOffsets requests once.
func (f *Fetcher) listOffsets(ctx context.Context) (Offsets, error) {
	var (
		offs Offsets
		err  error
	)
	if err = f.findLeader(ctx); err != nil {
		return offs, err
	}
	if offs.Earliest, err = f.listOffset(ctx, -2, 0); err != nil {
		return offs, err
	}
	if offs.Latest, err = f.listOffset(ctx, -1, 0); err != nil {
		return offs, err
	}
	if offs.LastStable, err = f.listOffset(ctx, -1, isolationReadCommitted); err != nil {
		return offs, err
	}
	return offs, nil
}

// listOffset sends one ListOffsets request for timestamp -2 (earliest), -1
// (latest) or a Unix millisecond time at the given isolation level to the
// leader.
func (f *Fetcher) listOffset(ctx context.Context, timestamp int64, isolation int8) (int64, error) {
	x := newExchange(&listoffsets.Request{
		ReplicaID:      -1,
		IsolationLevel: isolation,
		Topics: []listoffsets.RequestTopic{{
			Topic: f.topic,
			Partitions: []listoffsets.RequestPartition{{
				Partition:          int32(f.partition),
				CurrentLeaderEpoch: -1,
				Timestamp:          timestamp,
			}},
		}},
	}, f.opts.ClientID)
	x.minVer = 2 // IsolationLevel
	x.node = f.leader
	rctx, cancel := context.WithTimeout(ctx, f.opts.RequestTimeout)
	defer cancel()
	if _, err := f.rt.RoundTrip(rctx, f.addr, x.toBroker()); err != nil {
		return 0, f.connError(ctx, fmt.Errorf("list offsets: %w", err))
	}
	res, ok := x.res.(*listoffsets.Response)
	if !ok {
		return 0, retry(fmt.Errorf("list offsets: unexpected response %T", x.res))
	}
	for _, t := range res.Topics {
		if t.Topic != f.topic {
			continue
		}
		for _, p := range t.Partitions {
			if int(p.Partition) != f.partition {
				continue
			}
			if err := partitionError(p.ErrorCode); err != nil {
				if isRetriable(err) {
					f.leader = -1
				}
				return 0, fmt.Errorf("list offsets: %w", err)
			}
			return p.Offset, nil
		}
	}
	f.leader = -1
	return 0, retry(fmt.Errorf("list offsets: response from broker %d has no data for the partition", x.node))
}

// ToLastStable, passed as ReadRange's end, reads up to the last stable
// offset at the time of the call.
const ToLastStable int64 = -1

// ReadRange reads the committed records with offsets in [from, to) and calls
// fn with each non-empty batch, in offset order; to may be ToLastStable. It
// is the recovery read of a transactional output partition: with
// to = ToLastStable it returns once every decided record up to the last
// stable offset has been seen. An error from fn stops the read and is
// returned as is.
//
// ReadRange moves the Fetcher: afterwards Position is max(from, to), or
// where an error stopped it. The Batch passed to fn and its record slices are valid only
// during the call. A position that is out of range fails as Fetch does under
// the Fetcher's OutOfRange policy.
func (f *Fetcher) ReadRange(ctx context.Context, from, to int64, fn func(*Batch) error) error {
	to, err := f.startRange(ctx, from, to)
	if err != nil {
		return err
	}
	var b Batch
	for f.pos < to {
		if err := f.Fetch(ctx, &b); err != nil {
			return err
		}
		if f.pos > to {
			b.trimFrom(to)
			f.pos = to
			b.NextOffset = to
		}
		if len(b.Records) == 0 {
			continue
		}
		if err := fn(&b); err != nil {
			return err
		}
	}
	return nil
}

// startRange checks a range's bounds, resolves ToLastStable and moves the
// Fetcher to from; it returns the range's end.
func (f *Fetcher) startRange(ctx context.Context, from, to int64) (int64, error) {
	if from < 0 {
		return 0, f.errorf("read range: from must be >= 0, got %d", from)
	}
	if to == ToLastStable {
		offs, err := f.ListOffsets(ctx)
		if err != nil {
			return 0, err
		}
		to = offs.LastStable
	} else if to < 0 {
		return 0, f.errorf("read range: to must be >= 0 or ToLastStable, got %d", to)
	}
	f.SetPosition(from)
	return to, nil
}
