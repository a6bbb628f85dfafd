package fetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/fetch"
	meta "github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/dedupstream/dedupstream/internal/backoff"
)

// Offset sentinels accepted by SetPosition, resolved with ListOffsets by the
// next Fetch, and NoPosition.
const (
	// OffsetEarliest seeks to the log start offset.
	OffsetEarliest int64 = -2
	// OffsetLatest seeks to the last stable offset: only records committed
	// (or written without a transaction) after the seek are returned.
	OffsetLatest int64 = -1
	// NoPosition is what Position returns before the first SetPosition.
	NoPosition int64 = -3
)

// isolationReadCommitted is the Fetch/ListOffsets isolation level that stops
// at the last stable offset and reports aborted transactions.
const isolationReadCommitted = 1

// maxFrameSlack is how much a Fetch response may exceed MaxBytes (one record
// batch larger than MaxBytes is still sent whole) before it is rejected as
// garbage.
const maxFrameSlack = 256 << 20

// Fetcher reads one topic-partition with isolation level read_committed.
// It is not safe for concurrent use; use one Fetcher per partition and
// goroutine.
type Fetcher struct {
	rt        kafka.RoundTripper
	addr      net.Addr
	topic     string
	partition int
	opts      Options
	log       *slog.Logger

	pos        int64 // next offset to fetch, or an Offset sentinel
	positioned bool
	leader     int32 // partition leader node id; -1 when unknown

	ex  *fetchExchange // reused while its round trips complete
	dec decoder
}

// New returns a Fetcher for topic/partition that talks through client's
// transport (client.Transport, or kafka.DefaultTransport when nil) to the
// cluster bootstrapped from client.Addr, for example
//
//	&kafka.Client{Addr: kafka.TCP(brokers...), Transport: &kafka.Transport{TLS: tlsConfig, SASL: mech}}
//
// so TLS and SASL configured on the transport apply. New does no I/O: the
// leader is found on the first Fetch. Call SetPosition before Fetch.
func New(client *kafka.Client, topic string, partition int, opts Options) (*Fetcher, error) {
	var errs []error
	if client == nil || client.Addr == nil {
		errs = append(errs, errors.New("fetch: client: must have an Addr"))
	}
	if topic == "" {
		errs = append(errs, errors.New("fetch: topic: must not be empty"))
	}
	if partition < 0 || partition > maxInt32 {
		errs = append(errs, fmt.Errorf("fetch: partition: must be in [0, %d], got %d", maxInt32, partition))
	}
	if err := opts.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rt := client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	if t, ok := rt.(*kafka.Transport); ok && opts.ClientID == "" {
		opts.ClientID = t.ClientID
	}
	opts.ApplyDefaults()
	f := &Fetcher{
		rt:        rt,
		addr:      client.Addr,
		topic:     topic,
		partition: partition,
		opts:      opts,
		log:       opts.Logger.With("topic", topic, "partition", partition),
		leader:    -1,
	}
	return f, nil
}

// fetchExchange is a Fetch request with the exchange that carries it. Both
// are abandoned together when a round trip is left in flight.
type fetchExchange struct {
	*exchange
	req fetch.Request
}

func (f *Fetcher) newFetchExchange() *fetchExchange {
	fx := &fetchExchange{req: fetch.Request{
		ReplicaID:      -1,
		MinBytes:       int32(f.opts.MinBytes),
		MaxBytes:       int32(f.opts.MaxRequestBytes),
		IsolationLevel: isolationReadCommitted,
		SessionID:      0,
		SessionEpoch:   -1, // full fetch, no incremental fetch session
		Topics: []fetch.RequestTopic{{
			Topic: f.topic,
			Partitions: []fetch.RequestPartition{{
				Partition:          int32(f.partition),
				CurrentLeaderEpoch: -1,
				LogStartOffset:     -1,
				PartitionMaxBytes:  int32(f.opts.MaxBytes),
			}},
		}},
	}}
	fx.exchange = newExchange(&fx.req, f.opts.ClientID)
	fx.minVer = 4 // IsolationLevel, LastStableOffset, AbortedTransactions
	fx.raw = true
	fx.maxSize = f.opts.MaxBytes + maxFrameSlack
	return fx
}

// responseMaxBytes is the default response-level limit of a fetch whose one
// partition is limited to partitionMaxBytes. It is set well above the
// partition limit, as Java's fetch.max.bytes (50 MiB) is above
// max.partition.fetch.bytes (1 MiB), so that the partition limit is the one
// that applies: kfake, when the response-level limit cuts a response, leaves
// out the partition's AbortedTransactions, which would let aborted records
// through.
func responseMaxBytes(partitionMaxBytes int) int {
	return int(min(maxInt32, max(2*int64(partitionMaxBytes), 50<<20)))
}

// Topic returns the fetched topic.
func (f *Fetcher) Topic() string { return f.topic }

// Partition returns the fetched partition.
func (f *Fetcher) Partition() int { return f.partition }

// SetPosition sets the offset of the next Fetch: an offset, OffsetEarliest or
// OffsetLatest. Any other negative value is rejected by the next Fetch.
func (f *Fetcher) SetPosition(offset int64) {
	f.pos = offset
	f.positioned = true
}

// Position returns the offset the next Fetch starts at: one past the last
// offset the previous Fetch covered (aborted records and transaction markers
// included), or what SetPosition set. It is an Offset sentinel until the
// next Fetch resolves it, and NoPosition before the first SetPosition.
func (f *Fetcher) Position() int64 {
	if !f.positioned {
		return NoPosition
	}
	return f.pos
}

// Fetch fills b with the committed records from the current position on and
// advances the position past them. The broker answers once MinBytes of
// record data are readable, or after MaxWait with what there is (b with no
// records when there is nothing). Retriable errors (leader change,
// connection loss, unavailable partition) are retried with backoff after
// refreshing the leader, for up to RetryTimeout. An out-of-range position
// is handled by the OutOfRange policy.
//
// Record slices in b alias b's buffers until b is passed to Fetch again.
func (f *Fetcher) Fetch(ctx context.Context, b *Batch) error {
	return f.FetchWait(ctx, b, Wait{Max: f.opts.MaxWait, MinBytes: f.opts.MinBytes})
}

// Wait is how long (Max) and for how much record data (MinBytes, at most
// the fetcher's MaxBytes; below 1: 1) the broker holds one fetch before it
// answers.
type Wait struct {
	Max      time.Duration
	MinBytes int
}

// FetchWait is Fetch with the broker's wait of this call given by w instead
// of the Options. A job that commits in cycles asks for a full batch or the
// end of its read phase, whichever comes first: at low input rates it then
// reads once per cycle instead of once per produce of its input.
func (f *Fetcher) FetchWait(ctx context.Context, b *Batch, w Wait) error {
	w.MinBytes = min(max(w.MinBytes, 1), f.opts.MaxBytes)
	w.Max = max(w.Max, 0)
	b.reset(f.topic, f.partition)
	if !f.positioned {
		return f.errorf("%w", errNoPosition)
	}
	if f.pos < OffsetEarliest {
		return f.errorf("invalid position %d", f.pos)
	}
	op := func() error { return f.fetchOnce(ctx, b, w) }
	for resets := 0; ; resets++ {
		err := f.retry(ctx, "fetch", op)
		if err != errPositionReset {
			return err
		}
		if resets == 2 {
			// The log keeps moving under us (retention racing the
			// reset): report the empty batch, the caller fetches again.
			return nil
		}
	}
}

// errPositionReset tells Fetch that the OutOfRange policy moved the position
// and the fetch should run again from there.
var errPositionReset = errors.New("position reset")

// fetchOnce runs one Fetch round trip, waiting as w says, and decodes it
// into b.
func (f *Fetcher) fetchOnce(ctx context.Context, b *Batch, w Wait) error {
	b.reset(f.topic, f.partition)
	if f.pos < 0 {
		if err := f.resolve(ctx); err != nil {
			return err
		}
	}
	if err := f.findLeader(ctx); err != nil {
		return err
	}
	if cap(b.buf) > 4*f.opts.MaxBytes+1<<20 {
		b.buf = nil // one oversized response must not pin its buffer
	}
	if cap(b.dbuf) > 16*f.opts.MaxBytes+1<<20 {
		b.dbuf = nil
	}
	p, err := f.exchangeOnce(ctx, &f.ex, isolationReadCommitted, &b.buf, f.pos, w)
	if err != nil {
		return err
	}
	if p.errorCode == int16(kafka.OffsetOutOfRange) {
		return f.outOfRange(ctx, b)
	}
	b.HighWatermark, b.LastStableOffset, b.LogStartOffset = p.highWatermark, p.lastStableOffset, p.logStartOffset
	next, err := f.dec.decodeRecords(b, &p, f.pos)
	if err != nil {
		b.Records = b.Records[:0]
		return err
	}
	f.pos = next
	b.NextOffset = next
	return nil
}

// exchangeOnce sends one Fetch of the partition from offset at the given
// isolation level, held by the broker as w says, on the exchange *ex (created when nil, dropped when its
// round trip is left in flight), with the response read into *frame, and
// returns the partition's data. A partition error other than
// OFFSET_OUT_OF_RANGE is returned as an error; that one is left in
// errorCode for the caller.
func (f *Fetcher) exchangeOnce(ctx context.Context, ex **fetchExchange, isolation int8, frame *[]byte, offset int64, w Wait) (partitionData, error) {
	fx := *ex
	if fx == nil {
		fx = f.newFetchExchange()
		fx.req.IsolationLevel = isolation
		*ex = fx
	}
	x := fx.exchange
	x.frame = *frame
	x.node = f.leader
	x.finished.Store(false)
	wait := w.Max
	if dl, ok := ctx.Deadline(); ok {
		// Let the broker answer (empty) before the caller's deadline
		// rather than abandoning the request.
		wait = max(0, min(wait, time.Until(dl)*3/4))
	}
	fx.req.MaxWaitTime = int32(wait / time.Millisecond)
	fx.req.MinBytes = int32(w.MinBytes)
	fx.req.Topics[0].Partitions[0].FetchOffset = offset

	rctx, cancel := context.WithTimeout(ctx, wait+f.opts.RequestTimeout)
	_, err := f.rt.RoundTrip(rctx, f.addr, x.toBroker())
	cancel()
	if !x.finished.Load() {
		// The request may still be running on the connection and
		// writing into x.frame: leave both to it.
		*ex, *frame = nil, nil
		if err == nil {
			err = errors.New("round trip returned before the exchange finished")
		}
	} else {
		*frame = x.frame
	}
	if err != nil {
		return partitionData{}, f.connError(ctx, err)
	}

	p, found, err := f.dec.parseResponse(*frame, x.version, f.topic, int32(f.partition))
	if err != nil {
		if isRetriable(err) {
			f.leader = -1
		}
		return p, err
	}
	if !found {
		f.leader = -1
		return p, retry(fmt.Errorf("response from broker %d has no data for the partition", x.node))
	}
	if p.errorCode != int16(kafka.OffsetOutOfRange) {
		if err := partitionError(p.errorCode); err != nil {
			if isRetriable(err) {
				f.leader = -1
			}
			return p, err
		}
	}
	return p, nil
}

// connError classifies a failed round trip: the caller's context ending and
// broker errors that no retry fixes (SASL authentication, authorization) are
// final; anything else (dial, I/O, timeout, stale routing) is retried
// against a freshly looked-up leader.
func (f *Fetcher) connError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ke kafka.Error
	if errors.As(err, &ke) && !isRetriable(partitionError(int16(ke))) {
		return err
	}
	f.leader = -1
	return retry(err)
}

// outOfRange applies the OutOfRange policy after OFFSET_OUT_OF_RANGE.
func (f *Fetcher) outOfRange(ctx context.Context, b *Batch) error {
	offs, err := f.listOffsets(ctx)
	if err != nil {
		return err
	}
	old := f.pos
	switch f.opts.OutOfRange {
	case OutOfRangeEarliest:
		f.pos = offs.Earliest
	case OutOfRangeLatest:
		f.pos = offs.LastStable
	default:
		return &OutOfRangeError{Topic: f.topic, Partition: f.partition, Offset: old, Earliest: offs.Earliest, Latest: offs.Latest}
	}
	f.log.Warn("fetch: offset out of range, position reset by policy",
		"offset", old, "earliest", offs.Earliest, "latest", offs.Latest,
		"policy", f.opts.OutOfRange.String(), "new_offset", f.pos)
	if f.opts.OnReset != nil {
		f.opts.OnReset(old, f.pos)
	}
	b.NextOffset = f.pos
	return errPositionReset
}

// resolve turns an Offset sentinel position into an offset.
func (f *Fetcher) resolve(ctx context.Context) error {
	offs, err := f.listOffsets(ctx)
	if err != nil {
		return err
	}
	if f.pos == OffsetEarliest {
		f.pos = offs.Earliest
	} else {
		f.pos = offs.LastStable
	}
	return nil
}

// findLeader looks the partition leader up with a Metadata request that
// bypasses the transport's metadata cache, unless it is known.
func (f *Fetcher) findLeader(ctx context.Context) error {
	if f.leader >= 0 {
		return nil
	}
	x := newExchange(&meta.Request{TopicNames: []string{f.topic}}, f.opts.ClientID)
	rctx, cancel := context.WithTimeout(ctx, f.opts.RequestTimeout)
	defer cancel()
	if _, err := f.rt.RoundTrip(rctx, f.addr, x.toBootstrap()); err != nil {
		return f.connError(ctx, fmt.Errorf("metadata: %w", err))
	}
	res, ok := x.res.(*meta.Response)
	if !ok {
		return retry(fmt.Errorf("metadata: unexpected response %T", x.res))
	}
	for _, t := range res.Topics {
		if t.Name != f.topic {
			continue
		}
		if err := partitionError(t.ErrorCode); err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		for _, p := range t.Partitions {
			if int(p.PartitionIndex) != f.partition {
				continue
			}
			if err := partitionError(p.ErrorCode); err != nil && !errors.Is(err, kafka.ReplicaNotAvailable) {
				return fmt.Errorf("metadata: %w", err)
			}
			if p.LeaderID < 0 {
				return retry(errors.New("metadata: partition has no leader"))
			}
			if f.leader != p.LeaderID {
				f.log.Debug("fetch: partition leader", "broker", p.LeaderID)
			}
			f.leader = p.LeaderID
			return nil
		}
		return retry(fmt.Errorf("metadata: %w", kafka.UnknownTopicOrPartition))
	}
	return retry(fmt.Errorf("metadata: %w", kafka.UnknownTopicOrPartition))
}

// retry runs op until it succeeds, fails with a non-retriable error, the
// context ends or RetryTimeout passes, backing off between attempts.
func (f *Fetcher) retry(ctx context.Context, what string, op func() error) error {
	var start time.Time
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		if err == errPositionReset {
			return err
		}
		if !isRetriable(err) {
			return f.wrap(what, err)
		}
		if start.IsZero() {
			start = time.Now()
		}
		if f.opts.RetryTimeout >= 0 && time.Since(start) >= f.opts.RetryTimeout {
			return f.wrap(what, fmt.Errorf("giving up after %d attempts in %v: %w", attempt, time.Since(start).Round(time.Millisecond), err))
		}
		wait := backoff.Delay(f.opts.Backoff, f.opts.MaxBackoff, attempt)
		f.log.Warn("fetch: retrying", "op", what, "attempt", attempt, "backoff", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return f.wrap(what, fmt.Errorf("%w (last error: %v)", ctx.Err(), err))
		case <-t.C:
		}
	}
}

// wrap adds the topic-partition and operation to a final error; an
// *OutOfRangeError already names them and is returned as is.
func (f *Fetcher) wrap(what string, err error) error {
	var oor *OutOfRangeError
	if errors.As(err, &oor) {
		return err
	}
	if what == "fetch" {
		return f.errorf("offset %d: %w", f.pos, err)
	}
	return f.errorf("%s: %w", what, err)
}

// errorf formats an error prefixed with "fetch: topic[partition]: ".
func (f *Fetcher) errorf(format string, args ...any) error {
	return fmt.Errorf("fetch: %s[%d]: "+format, append([]any{f.topic, f.partition}, args...)...)
}

var _ protocol.Message = (*exchange)(nil)
