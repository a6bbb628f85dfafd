package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/findcoordinator"
	"github.com/segmentio/kafka-go/protocol/initproducerid"
	"github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/dedupstream/dedupstream/internal/backoff"
)

// Config configures a Producer. Call ApplyDefaults, then Validate;
// NewProducer does both on its own copy.
type Config struct {
	// Client gives the cluster address (Client.Addr, required) and the
	// transport (Client.Transport; kafka.DefaultTransport when nil). Share
	// one *kafka.Transport between all producers of a job: it multiplexes
	// their requests over its connections and carries TLS and SASL.
	// Client.Timeout is not used; see RequestTimeout.
	Client *kafka.Client

	// TransactionalID identifies the producer across restarts; the job uses
	// "<job.id>-<p>" for stage p. Required.
	TransactionalID string

	// TransactionTimeout is how long the coordinator lets a transaction
	// stay open before aborting it (and fencing this producer's epoch).
	// It must exceed the commit interval with a wide margin and must not
	// exceed the broker's transaction.max.timeout.ms.
	// The default value is 60s.
	TransactionTimeout time.Duration

	// RequestTimeout bounds one request attempt. A produce or EndTxn
	// attempt that times out has an unknown outcome.
	// The default value is 10s.
	RequestTimeout time.Duration

	// RetryTimeout bounds all attempts of one call (one produce batch, one
	// EndTxn, ...). The call returns the last error when it is spent.
	// The default value is 30s.
	RetryTimeout time.Duration

	// RetryBackoff is the wait before the first retry; each further retry
	// doubles it, up to MaxRetryBackoff, with jitter.
	// The default values are 50ms and 1s.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration

	// PendingEndPoll is the wait between attempts of AddPartitionsToTxn and
	// AddOffsetsToTxn refused with CONCURRENT_TRANSACTIONS: the previous
	// transaction's EndTxn was answered, but the coordinator is still
	// writing its markers, which takes about two replicated writes. The
	// next cycle's first request lands in that window almost every time,
	// so it polls at this fixed pace (within RetryTimeout) instead of
	// backing off exponentially: with the 50 ms first backoff the waits
	// of 50, 100 and 200 ms added up to ~0.4 s per cycle on a loaded
	// 3-broker cluster (docs/benchmarks.md, "Latency decomposition,
	// session 10").
	// The default value is 10ms.
	PendingEndPoll time.Duration

	// MaxBatchBytes caps the encoded size of one record batch; Produce
	// splits larger calls into several batches. It must not exceed the
	// topic's max.message.bytes. A single record larger than this is sent
	// alone and is rejected by the broker if it exceeds the broker's limit.
	// The default value is 1 MiB.
	MaxBatchBytes int

	// MaxInFlight is how many produce requests (record batches) the
	// producer keeps in flight at once, 1 to MaxInFlightLimit (5). With 1
	// each batch waits for the previous one's answer. With more, Produce
	// returns once its batches are sent and the answers are taken in order
	// later; a batch that fails is resent with every later one, in
	// sequence order, so the broker stores each once and in order (see
	// inflight.go). Each request in flight holds a buffer of up to
	// MaxBatchBytes. The default value is 1.
	MaxInFlight int

	// Dialer, when set, carries the producer's produce requests on
	// connections of its own, one per broker, on which requests are
	// written back to back and answered in order (pipe.go): the batches in
	// flight reach the broker in sequence order. Give it the TLS and SASL
	// settings of Client.Transport (DialerFor). Close closes them. When
	// nil, produce requests go through Client.Transport, which serves one
	// request per connection at a time: with MaxInFlight > 1 batches then
	// travel on separate connections, may overtake each other and are
	// resent. The default value is nil.
	Dialer *Dialer

	// Watch, when set, is told of every request on the producer's own
	// connections (Dialer): the produce requests and the connection
	// set-up, as a RoundTripper wrapped around Client.Transport is told of
	// every other request, so that whoever watches the brokers' answers
	// sees these too. The default value is nil.
	Watch RequestWatch

	// Compression compresses every batch with one of kafka-go's codecs.
	// The default value is compress.None.
	Compression compress.Compression

	// Logger receives retries (debug) and failures (warn).
	// The default value discards everything.
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultTransactionTimeout = 60 * time.Second
	DefaultRequestTimeout     = 10 * time.Second
	DefaultRetryTimeout       = 30 * time.Second
	DefaultRetryBackoff       = 50 * time.Millisecond
	DefaultMaxRetryBackoff    = time.Second
	DefaultPendingEndPoll     = 10 * time.Millisecond
	DefaultMaxBatchBytes      = 1 << 20
)

// ApplyDefaults sets every zero field that has a default.
func (c *Config) ApplyDefaults() {
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = DefaultTransactionTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.RetryTimeout == 0 {
		c.RetryTimeout = DefaultRetryTimeout
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.MaxRetryBackoff == 0 {
		c.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	if c.PendingEndPoll == 0 {
		c.PendingEndPoll = DefaultPendingEndPoll
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every invalid field, one per line.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("sink: %s: "+format, append([]any{field}, args...)...))
	}
	switch {
	case c.Client == nil:
		bad("Client", "must be set")
	case c.Client.Addr == nil:
		bad("Client.Addr", "must be set")
	}
	if c.TransactionalID == "" {
		bad("TransactionalID", "must not be empty")
	}
	if c.TransactionTimeout < time.Millisecond || c.TransactionTimeout.Milliseconds() > math.MaxInt32 {
		bad("TransactionTimeout", "must be within 1ms and %d ms, got %v", math.MaxInt32, c.TransactionTimeout)
	}
	if c.RequestTimeout < time.Millisecond || c.RequestTimeout.Milliseconds() > math.MaxInt32 {
		bad("RequestTimeout", "must be within 1ms and %d ms, got %v", math.MaxInt32, c.RequestTimeout)
	}
	if c.RetryTimeout < 0 {
		bad("RetryTimeout", "must be >= 0, got %v", c.RetryTimeout)
	}
	if c.RetryBackoff <= 0 {
		bad("RetryBackoff", "must be > 0, got %v", c.RetryBackoff)
	}
	if c.PendingEndPoll <= 0 {
		bad("PendingEndPoll", "must be > 0, got %v", c.PendingEndPoll)
	}
	if c.MaxRetryBackoff < c.RetryBackoff {
		bad("MaxRetryBackoff", "must be >= RetryBackoff (%v), got %v", c.RetryBackoff, c.MaxRetryBackoff)
	}
	if c.MaxBatchBytes < 1024 {
		bad("MaxBatchBytes", "must be >= 1024, got %d", c.MaxBatchBytes)
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > MaxInFlightLimit {
		bad("MaxInFlight", "must be between 1 and %d, got %d", MaxInFlightLimit, c.MaxInFlight)
	}
	if c.Compression != compress.None && c.Compression.Codec() == nil {
		bad("Compression", "unknown codec %d", c.Compression)
	}
	if c.Logger == nil {
		bad("Logger", "must be set")
	}
	return errors.Join(errs...)
}

type topicPartition struct {
	topic     string
	partition int32
}

type state uint8

const (
	stateNew     state = iota // Init needed
	stateReady                // between transactions
	stateTxn                  // transaction open
	stateFailed               // transaction open after an error: Abort only
	stateRecover              // outcome unknown: Abort re-initialises
	stateFenced               // another producer took over
)

// Producer is a transactional producer for one stage, built on kafka-go's
// low-level transport. It is not safe for concurrent use: one goroutine (the
// stage) drives it. Producers of different stages run concurrently on one
// shared transport. See the package documentation for the protocol.
type Producer struct {
	cfg  Config
	rt   kafka.RoundTripper
	addr net.Addr
	log  *slog.Logger

	state  state
	pid    int64
	epoch  int16
	fenced error // the error that fenced the producer

	txnCoord   int32            // -1 when unknown
	groupCoord map[string]int32 // by group id
	leaders    map[topicPartition]int32
	addrs      map[int32]string         // broker addresses from the last Metadata
	pipes      map[int32]*pipe          // by broker (Config.Dialer set)
	seqs       map[topicPartition]int32 // next sequence per partition, this epoch

	// Open transaction.
	txnParts  map[topicPartition]struct{}
	txnGroups map[string]struct{}
	txnErr    error // first error of the transaction (stateFailed)
	// txnTouched: a request of this transaction reached (or may have
	// reached) the coordinator, so ending it needs EndTxn.
	txnTouched bool
	// txnStart is when the first request of the transaction was sent; it
	// is kept until the transaction is known to be over (EndTxn answered,
	// or a new epoch), even across a failed Abort, so that a fence can be
	// told apart from the coordinator's timeout abort (see FencedError).
	txnStart time.Time

	enc Encoder
	buf []byte // size prefix + record batch of the last produce

	// The window of produce requests in flight (MaxInFlight > 1), oldest
	// first, and flights to reuse. See inflight.go.
	flights []*flight
	free    []*flight
	// early is the AddOffsetsToTxn sent ahead by AddOffsetsEarly, nil
	// when none is out. See offsets_early.go.
	early *earlyOffsets
	// aheadErr is the failure of the offsets SendOffsetsAhead sent, until
	// OffsetsSent or Commit reports it.
	aheadErr error
	// txnSpans: per partition written, where the open transaction's
	// records landed (span.go).
	txnSpans map[topicPartition]Span
}

// NewProducer returns a producer; it does no I/O. Call Init before the first
// transaction.
func NewProducer(cfg Config) (*Producer, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rt := cfg.Client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	return &Producer{
		cfg:        cfg,
		rt:         rt,
		addr:       cfg.Client.Addr,
		log:        cfg.Logger.With(slog.String("transactional_id", cfg.TransactionalID)),
		pid:        -1,
		epoch:      -1,
		txnCoord:   -1,
		groupCoord: make(map[string]int32),
		leaders:    make(map[topicPartition]int32),
		addrs:      make(map[int32]string),
		pipes:      make(map[int32]*pipe),
		seqs:       make(map[topicPartition]int32),
		txnParts:   make(map[topicPartition]struct{}),
		txnGroups:  make(map[string]struct{}),
		txnSpans:   make(map[topicPartition]Span),
	}, nil
}

// TransactionalID returns the configured transactional id.
func (p *Producer) TransactionalID() string { return p.cfg.TransactionalID }

// ProducerID returns the producer id and epoch of the last successful Init,
// or -1, -1 before.
func (p *Producer) ProducerID() (id int64, epoch int16) { return p.pid, p.epoch }

// Init obtains a producer id and epoch for the transactional id with
// InitProducerID. The coordinator bumps the epoch, which fences any previous
// owner of the transactional id (its requests fail with PRODUCER_FENCED or
// INVALID_PRODUCER_EPOCH) and aborts a transaction it left open; a
// transaction of ours whose EndTxn(commit) was already received completes
// first. Sequence numbers restart at 0.
//
// Call Init at start and on a new assignment. It may be called in any
// state, also after ErrFenced, but then it fences whoever holds the id now:
// a stage that lost its partition must not call it.
//
// After an ambiguous error, Init (like Abort) re-initialises with the
// producer id and epoch it holds (KIP-360) instead: the coordinator then
// answers PRODUCER_FENCED, rather than handing the id back, if another
// producer took it over meanwhile (brokers 2.5 and later).
func (p *Producer) Init(ctx context.Context) error {
	if p.state == stateRecover {
		return p.reinit(ctx)
	}
	return p.initProducerID(ctx, -1, -1)
}

// Resume re-initialises a producer that already owns its transactional id,
// for every recovery after the first: it always uses the producer id and
// epoch it holds (KIP-360), so a producer that was replaced meanwhile gets
// ErrFenced instead of fencing its successor (brokers 2.5 and later). It
// aborts an open transaction and restarts sequences like Init. Before the
// first successful Init it is Init; after ErrFenced it returns ErrFenced
// without asking the broker.
func (p *Producer) Resume(ctx context.Context) error {
	if p.state == stateFenced {
		return p.fenced
	}
	return p.reinit(ctx)
}

// reinit bumps the epoch of the producer id we hold (KIP-360): unlike Init
// it fails with PRODUCER_FENCED instead of taking over when another producer
// has initialised the transactional id since (brokers 2.5 and later). When
// the coordinator no longer knows our producer id (it expired), it falls
// back to InitProducerID(-1, -1).
func (p *Producer) reinit(ctx context.Context) error {
	if p.pid < 0 {
		return p.initProducerID(ctx, -1, -1)
	}
	err := p.initProducerID(ctx, p.pid, p.epoch)
	var pe *Error
	if errors.As(err, &pe) && pe.Code == kafka.InvalidProducerIDMapping {
		return p.initProducerID(ctx, -1, -1)
	}
	return err
}

func (p *Producer) initProducerID(ctx context.Context, pid int64, epoch int16) error {
	p.settleWindow() // the new epoch fences what is still out; wait for it
	p.joinEarly()
	p.resetTxn()
	res, err := p.coordinatorCall(ctx, call{
		op:        "init producer id",
		partition: -1,
		build: func() protocol.Message {
			return &initproducerid.Request{
				TransactionalID:      p.cfg.TransactionalID,
				TransactionTimeoutMs: int32(p.cfg.TransactionTimeout.Milliseconds()),
				ProducerID:           pid,
				ProducerEpoch:        epoch,
			}
		},
		code: func(m protocol.Message) kafka.Error { return kafka.Error(m.(*initproducerid.Response).ErrorCode) },
	})
	if err != nil {
		p.state = stateNew
		if pid >= 0 {
			p.state = stateRecover // try the KIP-360 way again
		}
		if ClassOf(err) == ClassFenced {
			err = p.explainFence(ctx, err)
			p.state, p.fenced = stateFenced, err
		}
		return err
	}
	r := res.(*initproducerid.Response)
	p.pid, p.epoch = r.ProducerID, r.ProducerEpoch
	p.txnStart = time.Time{} // the new epoch ended whatever was open
	clear(p.seqs)
	p.state, p.fenced = stateReady, nil
	p.log.Debug("sink: producer initialised", slog.Int64("producer_id", p.pid), slog.Int("epoch", int(p.epoch)))
	return nil
}

// call describes a request to a coordinator.
type call struct {
	op        string
	group     string // "" for the transaction coordinator, else the group's
	topic     string // for errors
	partition int32  // for errors, -1 when none
	build     func() protocol.Message
	code      func(protocol.Message) kafka.Error
	// ambiguousOnTimeout ends the call as ambiguous on a network error, a
	// timeout or a REQUEST_TIMED_OUT answer instead of retrying. For
	// EndTxn: a request of unknown fate may still reach the coordinator
	// later, and EndTxn before v5 (all kafka-go speaks) does not bump the
	// epoch, so a late commit could end the next transaction of the same
	// epoch early. Only a new epoch (Init) makes such a request harmless.
	ambiguousOnTimeout bool
	// pollPendingEnd retries CONCURRENT_TRANSACTIONS every PendingEndPoll
	// (the previous transaction's markers are being written) instead of
	// backing off: AddPartitionsToTxn and AddOffsetsToTxn.
	pollPendingEnd bool
}

// coordinatorCall sends a request to the transaction (or group) coordinator
// until it succeeds, fails for good, or the retry budget is spent. The
// coordinator is cached and looked up again only after NOT_COORDINATOR,
// COORDINATOR_NOT_AVAILABLE or a network error.
func (p *Producer) coordinatorCall(ctx context.Context, c call) (protocol.Message, error) {
	p.joinEarly() // one coordinator call at a time
	return p.callCoordinator(ctx, c)
}

// callCoordinator is coordinatorCall without waiting for an early
// AddOffsetsToTxn: that call itself.
func (p *Producer) callCoordinator(ctx context.Context, c call) (protocol.Message, error) {
	a := p.newAttempts(ctx, c.op, c.topic, c.partition)
	for {
		a.n++
		coord, code, err := p.coordinator(ctx, c.group)
		if err == nil && code == 0 {
			var res protocol.Message
			if res, err = p.send(ctx, coord, c.build()); err == nil {
				if code = c.code(res); code == 0 {
					return res, nil
				}
				if isCoordinatorCode(code) {
					p.forgetCoordinator(c.group)
				}
				if c.ambiguousOnTimeout && (code == kafka.RequestTimedOut || code == kafka.NetworkException) {
					return nil, a.ambiguous(code, code)
				}
			} else {
				p.forgetCoordinator(c.group)
				if c.ambiguousOnTimeout && !notSent(err) {
					return nil, a.ambiguous(0, err)
				}
			}
		}
		if err != nil {
			if !a.again(err) {
				return nil, a.fail(ClassRetriable, 0, err)
			}
			continue
		}
		class := classifyCode(code)
		wait := backoff.Delay(p.cfg.RetryBackoff, p.cfg.MaxRetryBackoff, a.n)
		if c.pollPendingEnd && code == kafka.ConcurrentTransactions {
			wait = p.cfg.PendingEndPoll
		}
		if class != ClassRetriable || !a.againAfter(code, wait) {
			if class == ClassAmbiguous {
				return nil, a.ambiguous(code, code)
			}
			return nil, a.fail(class, code, code)
		}
	}
}

// coordinator returns the cached coordinator of the transactional id (group
// "") or of a consumer group, looking it up with FindCoordinator when
// unknown. A non-zero code is the broker's answer to FindCoordinator.
func (p *Producer) coordinator(ctx context.Context, group string) (int32, kafka.Error, error) {
	key, keyType := p.cfg.TransactionalID, int8(kafka.CoordinatorKeyTypeTransaction)
	if group != "" {
		if id, ok := p.groupCoord[group]; ok {
			return id, 0, nil
		}
		key, keyType = group, int8(kafka.CoordinatorKeyTypeConsumer)
	} else if p.txnCoord >= 0 {
		return p.txnCoord, 0, nil
	}
	res, err := p.send(ctx, -1, &findcoordinator.Request{Key: key, KeyType: keyType})
	if err != nil {
		return -1, 0, fmt.Errorf("find coordinator: %w", err)
	}
	r := res.(*findcoordinator.Response)
	if r.ErrorCode != 0 {
		return -1, kafka.Error(r.ErrorCode), nil
	}
	if group != "" {
		p.groupCoord[group] = r.NodeID
	} else {
		p.txnCoord = r.NodeID
	}
	return r.NodeID, 0, nil
}

func (p *Producer) forgetCoordinator(group string) {
	if group != "" {
		delete(p.groupCoord, group)
	} else {
		p.txnCoord = -1
	}
}

// leader returns the cached leader of tp, refreshing the topic's leaders
// with a Metadata request (sent to the bootstrap broker, not answered from
// the transport's cache) when unknown. A non-zero code says why there is no
// leader.
func (p *Producer) leader(ctx context.Context, tp topicPartition) (int32, kafka.Error, error) {
	if id, ok := p.leaders[tp]; ok {
		return id, 0, nil
	}
	res, err := p.send(ctx, -1, &metadata.Request{TopicNames: []string{tp.topic}})
	if err != nil {
		return -1, 0, fmt.Errorf("metadata: %w", err)
	}
	code := kafka.UnknownTopicOrPartition
	md := res.(*metadata.Response)
	for _, b := range md.Brokers {
		p.addrs[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	for _, t := range md.Topics {
		if t.Name != tp.topic {
			continue
		}
		if t.ErrorCode != 0 {
			return -1, kafka.Error(t.ErrorCode), nil
		}
		for _, pt := range t.Partitions {
			switch {
			case pt.ErrorCode == 0 && pt.LeaderID >= 0:
				p.leaders[topicPartition{tp.topic, pt.PartitionIndex}] = pt.LeaderID
			case pt.PartitionIndex == tp.partition:
				code = kafka.Error(pt.ErrorCode)
				if code == 0 {
					code = kafka.LeaderNotAvailable
				}
			}
		}
	}
	if id, ok := p.leaders[tp]; ok {
		return id, 0, nil
	}
	return -1, code, nil
}

// send sends one request to a broker (-1: the bootstrap connection) with a
// deadline of RequestTimeout.
func (p *Producer) send(ctx context.Context, broker int32, req protocol.Message) (protocol.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	res, err := p.rt.RoundTrip(ctx, p.addr, &routed{msg: req, broker: broker})
	if err != nil {
		return nil, err
	}
	rr, ok := res.(*routedResponse)
	if !ok {
		return nil, fmt.Errorf("sink: transport answered %T, want a routed response", res)
	}
	return rr.msg, nil
}

// notSent reports transport errors that prove the request never left: no
// connection to the broker could be had.
func notSent(err error) bool {
	var op *net.OpError
	var de *dialError
	return errors.Is(err, kafka.BrokerNotAvailable) || errors.As(err, &op) && op.Op == "dial" || errors.As(err, &de)
}

// dialError is a failure to open a produce connection: the request that
// needed it was not sent.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// pipeTo returns the produce connection to broker, dialling a new one when
// there is none or the last one broke or idled too long.
func (p *Producer) pipeTo(ctx context.Context, broker int32) (*pipe, error) {
	if pp := p.pipes[broker]; pp != nil {
		if pp.usable(time.Now()) {
			return pp, nil
		}
		pp.close()
		delete(p.pipes, broker)
	}
	addr, ok := p.addrs[broker]
	if !ok {
		return nil, &dialError{fmt.Errorf("sink: no address known for broker %d: %w", broker, kafka.BrokerNotAvailable)}
	}
	w := p.cfg.Watch
	if w != nil {
		w.RequestSent() // ApiVersions (and SASL) on the new connection
	}
	pp, err := p.cfg.Dialer.dialPipe(ctx, broker, addr)
	if w != nil {
		w.RequestDone(err)
	}
	if err != nil {
		return nil, &dialError{err}
	}
	pp.watch = w
	p.pipes[broker] = pp
	return pp, nil
}

// Close closes the producer's produce connections (Config.Dialer); requests
// still out on them end with unknown outcomes. The producer dials again if
// used after Close.
func (p *Producer) Close() error {
	for b, pp := range p.pipes {
		pp.close()
		delete(p.pipes, b)
	}
	return nil
}

// attempts tracks the retries of one call.
type attempts struct {
	p         *Producer
	ctx       context.Context
	op        string
	topic     string
	partition int32
	n         int
	deadline  time.Time
}

func (p *Producer) newAttempts(ctx context.Context, op, topic string, partition int32) *attempts {
	return &attempts{p: p, ctx: ctx, op: op, topic: topic, partition: partition,
		deadline: time.Now().Add(p.cfg.RetryTimeout)}
}

// again waits for the next attempt after cause, with exponential backoff and
// jitter. It returns false when the caller's context ended or the retry
// budget would be exceeded.
func (a *attempts) again(cause error) bool {
	return a.againAfter(cause, backoff.Delay(a.p.cfg.RetryBackoff, a.p.cfg.MaxRetryBackoff, a.n))
}

// againAfter is again with the wait d chosen by the caller.
func (a *attempts) againAfter(cause error, d time.Duration) bool {
	if a.ctx.Err() != nil {
		return false
	}
	if time.Now().Add(d).After(a.deadline) {
		return false
	}
	a.p.log.Debug("sink: retrying", slog.String("op", a.op), slog.String("topic", a.topic),
		slog.Int("partition", int(a.partition)), slog.Int("attempt", a.n), slog.Any("err", cause))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-a.ctx.Done():
		return false
	}
}

func (a *attempts) fail(class Class, code kafka.Error, cause error) *Error {
	e := &Error{Op: a.op, TransactionalID: a.p.cfg.TransactionalID, Topic: a.topic,
		Partition: a.partition, Code: code, Class: class, Attempts: a.n, Err: cause}
	if ctxErr := a.ctx.Err(); ctxErr != nil && code == 0 && !errors.Is(cause, ctxErr) {
		e.Err = fmt.Errorf("%w (%w)", ctxErr, cause)
	}
	a.p.log.Warn("sink: request failed", slog.String("op", a.op), slog.String("class", class.String()),
		slog.Int("attempts", a.n), slog.Any("err", cause))
	return e
}

func (a *attempts) ambiguous(code kafka.Error, cause error) *AmbiguousError {
	return &AmbiguousError{Err: a.fail(ClassAmbiguous, code, cause)}
}
