package sink

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/addpartitionstotxn"
	"github.com/segmentio/kafka-go/protocol/endtxn"
	"github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
	"github.com/segmentio/kafka-go/protocol/txnoffsetcommit"
)

// ProduceResult tells where the records of one Produce call landed.
type ProduceResult struct {
	// BaseOffset is the offset of the first record, -1 if unknown.
	BaseOffset int64
	// NextOffset is the offset after the last record, -1 if unknown. The
	// commit marker of the transaction takes the next offset after the
	// transaction's last record.
	NextOffset int64
	// Batches is how many record batches the records took.
	Batches int
}

// Group names the consumer group whose offsets a transaction commits.
type Group struct {
	// ID is the group id. Required.
	ID string
	// MemberID, GenerationID and InstanceID identify the group member whose
	// assignment the stage serves (assignment mode group). The coordinator
	// then rejects the commit of a stale generation, which this package
	// reports as ErrFenced. An empty MemberID means no membership
	// (assignment mode static): generation -1 is sent and not checked.
	MemberID     string
	GenerationID int32
	InstanceID   string
}

// Offset is an input position committed with a transaction.
type Offset struct {
	Topic     string
	Partition int32
	// Offset is the next offset to consume.
	Offset int64
	// Metadata is stored with the offset; may be empty.
	Metadata string
}

// Begin opens a transaction. It does no I/O: partitions and the group are
// added to the transaction on first use.
func (p *Producer) Begin() error {
	if err := p.check("begin", stateReady); err != nil {
		return err
	}
	p.state = stateTxn
	return nil
}

// Produce writes recs to a partition within the open transaction. The
// partition is added to the transaction (AddPartitionsToTxn) on its first
// use in the transaction. Records are sent in batches of at most
// MaxBatchBytes with acks=all; a batch that fails with a retriable error is
// resent unchanged (same sequence), so the broker stores it once.
//
// With MaxInFlight 1 each batch is answered before the next is sent and the
// result says where the records landed. With more, Produce returns once
// the batches are sent, up to MaxInFlight requests stay in flight (see
// inflight.go for the order and retry guarantees), BaseOffset and
// NextOffset are -1, and the failure of a batch may surface in a later
// Produce, in Flush, SendOffsets or Commit; Span(topic, partition) tells
// where the records landed after Flush.
//
// Records must stay unchanged until Produce returns (they are encoded into
// the producer's own buffers). After any error the transaction can only be
// aborted.
func (p *Producer) Produce(ctx context.Context, topic string, partition int32, recs []Record) (ProduceResult, error) {
	res := ProduceResult{BaseOffset: -1, NextOffset: -1}
	if err := p.check("produce", stateTxn); err != nil {
		return res, err
	}
	if len(recs) == 0 {
		return res, nil
	}
	tp := topicPartition{topic, partition}
	if _, ok := p.txnParts[tp]; !ok {
		if err := p.addPartition(ctx, tp); err != nil {
			return res, p.fail(ctx, err)
		}
	}
	if p.cfg.MaxInFlight > 1 {
		res, err := p.produceAsync(ctx, tp, recs)
		if err != nil {
			return res, p.fail(ctx, err)
		}
		return res, nil
	}
	for first := true; len(recs) > 0; first = false {
		n, bound := p.batchSize(recs)
		base, err := p.produceBatch(ctx, tp, recs[:n], bound)
		if err != nil {
			return res, p.fail(ctx, err)
		}
		if first {
			res.BaseOffset = base
		}
		res.NextOffset = -1
		if base >= 0 {
			res.NextOffset = base + int64(n)
		}
		p.landed(tp, base, n)
		res.Batches++
		recs = recs[n:]
	}
	return res, nil
}

// Flush waits for every produce request in flight (MaxInFlight > 1) and
// returns the first error, after the retries described in inflight.go.
// SendOffsets and Commit flush first. After an error the transaction can
// only be aborted.
func (p *Producer) Flush(ctx context.Context) error {
	if err := p.check("flush", stateTxn); err != nil {
		return err
	}
	if err := p.flush(ctx); err != nil {
		return p.fail(ctx, err)
	}
	return nil
}

// SendOffsets adds input offsets to the open transaction: they become the
// group's committed offsets if and only if the transaction commits
// (AddOffsetsToTxn once per group per transaction, then TxnOffsetCommit to
// the group coordinator).
func (p *Producer) SendOffsets(ctx context.Context, g Group, offsets []Offset) error {
	if send, err := p.offsetsToSend(g, offsets); !send {
		return err
	}
	if err := p.flush(ctx); err != nil {
		return p.fail(ctx, err)
	}
	if err := p.OffsetsSent(); err != nil {
		return err // offsets sent ahead failed: the transaction can only abort
	}
	if _, ok := p.txnGroups[g.ID]; !ok {
		p.touch()
		if _, err := p.coordinatorCall(ctx, p.addOffsetsCall(g.ID)); err != nil {
			return p.fail(ctx, err)
		}
		p.txnGroups[g.ID] = struct{}{}
	}
	if _, err := p.coordinatorCall(ctx, p.offsetCommitCall(g, offsets)); err != nil {
		return p.fail(ctx, err)
	}
	return nil
}

// offsetsToSend checks a SendOffsets call: send is false when there is
// nothing to send, or (with err) when it cannot be sent.
func (p *Producer) offsetsToSend(g Group, offsets []Offset) (send bool, err error) {
	if err := p.check("send offsets", stateTxn); err != nil {
		return false, err
	}
	if g.ID == "" {
		return false, fmt.Errorf("sink: send offsets: empty group id: %w", ErrState)
	}
	return len(offsets) > 0, nil
}

// offsetCommitCall is TxnOffsetCommit of offsets for g in the open
// transaction.
func (p *Producer) offsetCommitCall(g Group, offsets []Offset) call {
	req := p.txnOffsetCommit(g, offsets)
	return call{
		op:        "txn offset commit",
		group:     g.ID,
		topic:     g.ID,
		partition: -1,
		build:     func() protocol.Message { return req },
		code: func(m protocol.Message) kafka.Error {
			return firstCode(m.(*txnoffsetcommit.Response).Topics,
				func(t *txnoffsetcommit.ResponseTopic) []txnoffsetcommit.ResponsePartition { return t.Partitions },
				func(pt *txnoffsetcommit.ResponsePartition) int16 { return pt.ErrorCode })
		},
	}
}

func (p *Producer) txnOffsetCommit(g Group, offsets []Offset) *txnoffsetcommit.Request {
	req := &txnoffsetcommit.Request{
		TransactionalID: p.cfg.TransactionalID,
		GroupID:         g.ID,
		ProducerID:      p.pid,
		ProducerEpoch:   p.epoch,
		GenerationID:    -1,
		MemberID:        g.MemberID,
		GroupInstanceID: g.InstanceID,
	}
	if g.MemberID != "" {
		req.GenerationID = g.GenerationID
	}
	for _, o := range offsets {
		i := slices.IndexFunc(req.Topics, func(t txnoffsetcommit.RequestTopic) bool { return t.Name == o.Topic })
		if i < 0 {
			req.Topics = append(req.Topics, txnoffsetcommit.RequestTopic{Name: o.Topic})
			i = len(req.Topics) - 1
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, txnoffsetcommit.RequestPartition{
			Partition:            o.Partition,
			CommittedOffset:      o.Offset,
			CommittedLeaderEpoch: -1,
			CommittedMetadata:    o.Metadata,
		})
	}
	return req
}

// Commit commits the open transaction with EndTxn(commit): its records become
// visible to read_committed consumers and its offsets become the group's
// committed offsets, all or nothing. A transaction that added nothing ends
// without a request.
//
// On an *AmbiguousError the transaction may or may not have committed: call
// Abort, then re-run recovery.
func (p *Producer) Commit(ctx context.Context) error {
	if err := p.check("commit", stateTxn); err != nil {
		return err
	}
	if err := p.flush(ctx); err != nil {
		return p.fail(ctx, err)
	}
	if err := p.OffsetsSent(); err != nil {
		return err
	}
	if err := p.endTxn(ctx, true); err != nil {
		return p.fail(ctx, err)
	}
	p.resetTxn()
	p.txnStart = time.Time{}
	p.state = stateReady
	return nil
}

// Abort ends the open transaction without effect: nothing it produced
// becomes visible, none of its offsets are committed.
//
// After an ambiguous error Abort re-initialises the producer instead of
// sending EndTxn(abort): InitProducerID with our current producer id and
// epoch (KIP-360) bumps the epoch, which fences every request of the old
// epoch still in flight, and the coordinator settles the open transaction
// (committed if our EndTxn(commit) arrived, aborted otherwise). The caller
// must then re-run recovery. Unlike Init, this does not take the
// transactional id back from a producer that initialised it meanwhile: the
// broker answers PRODUCER_FENCED (brokers 2.5 and later) and Abort returns
// ErrFenced. Abort re-initialises the same way when EndTxn(abort) fails.
// It returns nil when there is no transaction to abort.
func (p *Producer) Abort(ctx context.Context) error {
	if !p.settleWindow() && p.state != stateFenced {
		// Some batch of the window was not stored: the broker's sequences
		// may differ from ours. A new epoch restarts them.
		p.state = stateRecover
	}
	switch p.state {
	case stateNew, stateReady:
		return nil
	case stateFenced:
		return p.fenced
	case stateRecover:
		return p.reinit(ctx)
	}
	err := p.endTxn(ctx, false)
	if err == nil {
		p.resetTxn()
		p.txnStart = time.Time{}
		p.state = stateReady
		return nil
	}
	if ClassOf(err) == ClassFenced {
		return p.fail(ctx, err)
	}
	p.log.Warn("sink: abort failed, re-initialising", "err", err)
	return p.reinit(ctx)
}

func (p *Producer) endTxn(ctx context.Context, commit bool) error {
	if !p.txnTouched {
		return nil // the coordinator knows of no transaction
	}
	op := "end txn (abort)"
	if commit {
		op = "end txn (commit)"
	}
	_, err := p.coordinatorCall(ctx, call{
		op:        op,
		partition: -1,
		build: func() protocol.Message {
			return &endtxn.Request{
				TransactionalID: p.cfg.TransactionalID,
				ProducerID:      p.pid,
				ProducerEpoch:   p.epoch,
				Committed:       commit,
			}
		},
		code:               func(m protocol.Message) kafka.Error { return kafka.Error(m.(*endtxn.Response).ErrorCode) },
		ambiguousOnTimeout: true,
	})
	return err
}

func (p *Producer) addPartition(ctx context.Context, tp topicPartition) error {
	p.touch()
	_, err := p.coordinatorCall(ctx, call{
		op:             "add partitions to txn",
		topic:          tp.topic,
		partition:      tp.partition,
		pollPendingEnd: true,
		build: func() protocol.Message {
			return &addpartitionstotxn.Request{
				TransactionalID: p.cfg.TransactionalID,
				ProducerID:      p.pid,
				ProducerEpoch:   p.epoch,
				Topics:          []addpartitionstotxn.RequestTopic{{Name: tp.topic, Partitions: []int32{tp.partition}}},
			}
		},
		code: func(m protocol.Message) kafka.Error {
			return firstCode(m.(*addpartitionstotxn.Response).Results,
				func(t *addpartitionstotxn.ResponseResult) []addpartitionstotxn.ResponsePartition { return t.Results },
				func(pt *addpartitionstotxn.ResponsePartition) int16 { return pt.ErrorCode })
		},
	})
	if err == nil {
		p.txnParts[tp] = struct{}{}
	}
	return err
}

// firstCode is the error of a per-topic, per-partition response: the first
// partition's non-zero error code, or 0 when every partition succeeded.
func firstCode[T, P any](topics []T, parts func(*T) []P, code func(*P) int16) kafka.Error {
	for i := range topics {
		ps := parts(&topics[i])
		for j := range ps {
			if c := code(&ps[j]); c != 0 {
				return kafka.Error(c)
			}
		}
	}
	return 0
}

// batchLen returns how many leading records of recs fit in one batch of at
// most MaxBatchBytes (at least one).
func (p *Producer) batchLen(recs []Record) int {
	n, _ := p.batchSize(recs)
	return n
}

// batchSize returns batchLen's n and an upper bound of the bytes those n
// records take as an uncompressed batch, which encodeBatch sizes its
// buffer by.
func (p *Producer) batchSize(recs []Record) (n, bound int) {
	size := batchHeaderSize
	for i := range recs {
		r := recordSizeBound(&recs[i])
		if size+r > p.cfg.MaxBatchBytes && i > 0 {
			return i, size
		}
		size += r
	}
	return len(recs), size
}

// produceBatch sends recs as one record batch to the partition leader and
// returns its base offset (-1 if the broker reported a duplicate without
// it). The sequence advances only on success: a resent batch is the same
// bytes with the same sequence, so the broker stores it once.
func (p *Producer) produceBatch(ctx context.Context, tp topicPartition, recs []Record, bound int) (int64, error) {
	a := p.newAttempts(ctx, "produce", tp.topic, tp.partition)
	seq := p.seqs[tp]
	buf, err := p.encodeBatch(p.buf, seq, recs, bound)
	if err != nil {
		a.n = 1
		return -1, a.fail(ClassFatal, 0, err)
	}
	p.buf = buf

	base, unknown, err := p.sendBatch(a, tp, buf)
	if unknown {
		// A request that failed without an answer may still be read from
		// buf by the transport after we return; the next batch then gets
		// a new buffer rather than overwriting this one under it.
		p.buf = nil
	}
	if err != nil {
		return -1, err
	}
	p.seqs[tp] = nextSequence(seq, len(recs))
	return base, nil
}

// encodeBatch encodes recs as a batch with base sequence seq into dst's
// memory: the 4-byte size a RawRecordSet starts with, then the batch.
// bound is batchSize's for recs: a dst with less room is replaced by one
// allocation of that size (at least twice dst's, so that slowly growing
// batches still reallocate rarely), where appending would grow it by
// doubling and copy it about as many times as it doubles (a new
// producer's first batches of each in-flight buffer).
func (p *Producer) encodeBatch(dst []byte, seq int32, recs []Record, bound int) ([]byte, error) {
	if cap(dst) < 4+bound {
		dst = make([]byte, 0, max(4+bound, 2*cap(dst)))
	}
	buf := append(dst[:0], 0, 0, 0, 0)
	buf, err := p.enc.AppendBatch(buf, BatchHeader{
		ProducerID:    p.pid,
		ProducerEpoch: p.epoch,
		BaseSequence:  seq,
		Transactional: true,
		Compression:   p.cfg.Compression,
	}, recs)
	if err != nil {
		return dst, err
	}
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	return buf, nil
}

// sendBatch is the retry policy of one encoded batch: it sends buf until
// an attempt succeeds, ends the call, or the retry budget is spent. unknown
// reports that some attempt's fate stayed unknown: the batch may be in the
// log, and the transport may still hold buf.
func (p *Producer) sendBatch(a *attempts, tp topicPartition, buf []byte) (base int64, unknown bool, err error) {
	for {
		a.n++
		o := p.produceAttempt(a.ctx, tp, buf)
		unknown = unknown || o.unknown
		switch o.kind {
		case sendOK:
			return o.base, unknown, nil
		case sendRetryLeader:
			delete(p.leaders, tp)
		case sendFenced:
			return -1, unknown, a.fail(ClassFenced, o.code, o.cause)
		case sendFatal:
			return -1, unknown, a.fail(ClassFatal, o.code, o.cause)
		case sendAmbiguous:
			return -1, unknown, p.ambiguousProduce(a, tp, o)
		}
		if !a.again(o.cause) {
			if unknown {
				return -1, unknown, a.ambiguous(o.code, o.cause)
			}
			return -1, unknown, a.fail(ClassRetriable, o.code, o.cause)
		}
	}
}

// ambiguousProduce is the error of a produce answered with a code that
// says the broker's view of the producer differs from ours.
func (p *Producer) ambiguousProduce(a *attempts, tp topicPartition, o sendOutcome) error {
	if o.code == kafka.InvalidTransactionState {
		// Our transaction no longer holds the partition: the coordinator
		// ended it. Ask it whether our epoch is still current (brokers
		// answer INVALID_PRODUCER_EPOCH here directly; kfake does not).
		if perr := p.addPartition(a.ctx, tp); ClassOf(perr) == ClassFenced {
			return perr
		}
	}
	return a.ambiguous(o.code, o.cause)
}

// sendKind is what one produce attempt tells the retry policy to do.
type sendKind uint8

const (
	sendOK          sendKind = iota // stored (or a duplicate of a stored batch)
	sendRetry                       // transient: send again after a backoff
	sendRetryLeader                 // the leader moved or is unreachable: look it up, send again
	sendAmbiguous                   // the broker's view of the producer differs from ours
	sendFenced                      // a newer producer or coordinator owns the id
	sendFatal                       // retrying cannot help
)

// sendOutcome is the result of one produce attempt.
type sendOutcome struct {
	kind sendKind
	// unknown: the attempt ended without learning whether the batch
	// reached the log (lost response, timeout, incomplete answer).
	unknown bool
	base    int64       // sendOK: the base offset, -1 for a duplicate
	code    kafka.Error // the broker's code, 0 for transport errors
	cause   error       // what went wrong, for the error and the retry log
}

// produceAttempt sends buf once to tp's leader and classifies the answer.
// It changes no producer state but the leader cache its lookup fills.
func (p *Producer) produceAttempt(ctx context.Context, tp topicPartition, buf []byte) sendOutcome {
	leader, code, err := p.leader(ctx, tp)
	if err != nil {
		return sendOutcome{kind: sendRetry, cause: err}
	}
	if code != 0 {
		return codeOutcome(code, code)
	}
	return p.sendTo(ctx, leader, tp, buf)
}

// sendTo sends buf once to the broker leader and classifies the answer.
// It changes no producer state but the produce connections, so the
// requests of the window (without a Dialer) run it concurrently.
func (p *Producer) sendTo(ctx context.Context, leader int32, tp topicPartition, buf []byte) sendOutcome {
	if p.cfg.Dialer != nil {
		pp, c, err := p.pipeSend(ctx, leader, tp, buf)
		if err != nil {
			return produceOutcome(nil, err, tp)
		}
		res, err := pp.wait(ctx, c)
		return produceOutcome(res, err, tp)
	}
	res, err := p.send(ctx, leader, p.produceRequest(tp, buf))
	return produceOutcome(res, err, tp)
}

// pipeSend writes buf as a produce request on the leader's produce
// connection and returns without waiting for the answer. Once it returns,
// buf is no longer read.
func (p *Producer) pipeSend(ctx context.Context, leader int32, tp topicPartition, buf []byte) (*pipe, *pipeCall, error) {
	pp, err := p.pipeTo(ctx, leader)
	if err != nil {
		return nil, nil, err
	}
	c, err := pp.send(p.produceRequest(tp, buf), p.cfg.RequestTimeout)
	return pp, c, err
}

// produceRequest is the produce request of one encoded batch, acks=all.
func (p *Producer) produceRequest(tp topicPartition, buf []byte) protocol.Message {
	return &rawproduce.Request{
		TransactionalID: p.cfg.TransactionalID,
		Acks:            -1,
		Timeout:         int32(p.cfg.RequestTimeout.Milliseconds() * 3 / 4),
		Topics: []rawproduce.RequestTopic{{
			Topic: tp.topic,
			Partitions: []rawproduce.RequestPartition{{
				Partition: tp.partition,
				RecordSet: protocol.RawRecordSet{Reader: bytes.NewReader(buf)},
			}},
		}},
	}
}

// produceOutcome classifies the answer (or the transport's error) of one
// produce request for tp.
func produceOutcome(res protocol.Message, err error, tp topicPartition) sendOutcome {
	if err != nil {
		return sendOutcome{kind: sendRetryLeader, unknown: !notSent(err), cause: err}
	}
	base, code, msg, err := producePartition(res, tp)
	switch {
	case err != nil:
		return sendOutcome{kind: sendRetry, unknown: true, cause: err}
	case code == 0:
		return sendOutcome{kind: sendOK, base: base}
	case code == kafka.DuplicateSequenceNumber:
		return sendOutcome{kind: sendOK, base: -1}
	}
	var cause error = code
	if msg != "" {
		cause = fmt.Errorf("%w: %s", code, msg)
	}
	o := codeOutcome(code, cause)
	switch {
	case o.kind == sendRetry && isLeaderCode(code):
		o.kind = sendRetryLeader
	case code == kafka.RequestTimedOut || code == kafka.NotEnoughReplicasAfterAppend || code == kafka.NetworkException:
		o.unknown = true // the batch may be in the log
	}
	return o
}

// codeOutcome is the outcome of a non-zero broker code.
func codeOutcome(code kafka.Error, cause error) sendOutcome {
	o := sendOutcome{code: code, cause: cause}
	switch classifyCode(code) {
	case ClassRetriable:
		o.kind = sendRetry
	case ClassAmbiguous:
		o.kind = sendAmbiguous
	case ClassFenced:
		o.kind = sendFenced
	default:
		o.kind = sendFatal
	}
	return o
}

// producePartition finds tp's answer: base offset, error code and the
// broker's error message (produce v8).
func producePartition(m protocol.Message, tp topicPartition) (int64, kafka.Error, string, error) {
	for _, t := range m.(*produce.Response).Topics {
		if t.Topic != tp.topic {
			continue
		}
		for _, pt := range t.Partitions {
			if pt.Partition == tp.partition {
				return pt.BaseOffset, kafka.Error(pt.ErrorCode), pt.ErrorMessage, nil
			}
		}
	}
	return -1, 0, "", errors.New("sink: produce response lacks the partition")
}

// nextSequence advances a sequence number; sequences wrap from 2^31-1 to 0.
func nextSequence(seq int32, n int) int32 {
	return int32((int64(seq) + int64(n)) % (math.MaxInt32 + 1))
}

// check returns an error unless the producer is in state want.
func (p *Producer) check(op string, want state) error {
	switch {
	case p.state == want:
		return nil
	case p.state == stateFenced:
		return p.fenced
	case p.state == stateFailed:
		return fmt.Errorf("sink: %s: transaction failed, abort it: %w (%w)", op, ErrState, p.txnErr)
	case p.state == stateRecover:
		return fmt.Errorf("sink: %s: outcome of the transaction unknown, call Abort and recover: %w", op, ErrState)
	case p.state == stateNew:
		return fmt.Errorf("sink: %s: producer not initialised, call Init: %w", op, ErrState)
	case p.state == stateTxn:
		return fmt.Errorf("sink: %s: transaction open: %w", op, ErrState)
	default:
		return fmt.Errorf("sink: %s: no transaction open, call Begin: %w", op, ErrState)
	}
}

// fail records err's consequence (a fence with its cause) on the producer state and returns err.
func (p *Producer) fail(ctx context.Context, err error) error {
	switch ClassOf(err) {
	case ClassFenced:
		err = p.explainFence(ctx, err)
		p.state, p.fenced = stateFenced, err
	case ClassAmbiguous:
		p.state = stateRecover
	default:
		if p.state == stateTxn {
			p.state, p.txnErr = stateFailed, err
		}
	}
	return err
}

// touch notes that a request of the open transaction is about to go to the
// coordinator.
func (p *Producer) touch() {
	if p.txnStart.IsZero() {
		p.txnStart = time.Now()
	}
	p.txnTouched = true
}

// resetTxn forgets the open transaction; the caller knows it is over, or
// is about to end it with a new epoch.
func (p *Producer) resetTxn() {
	clear(p.txnSpans)
	clear(p.txnParts)
	clear(p.txnGroups)
	p.txnErr, p.aheadErr = nil, nil
	p.txnTouched = false
}
