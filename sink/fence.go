package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// FenceCause says why the coordinator stopped accepting our producer epoch.
//
// Two things bump the epoch of a transactional id: another InitProducerID
// (another instance, or an operator fencing the id), and the transaction
// coordinator itself when a transaction stays open longer than its
// transaction timeout (it aborts it and bumps the epoch so that the late
// producer cannot add to it). Both answer PRODUCER_FENCED or
// INVALID_PRODUCER_EPOCH. The producer tells them apart where the protocol
// allows; see FencedError.
type FenceCause uint8

const (
	// FenceTakenOver: another producer initialised the transactional id.
	// Certain when our transaction was younger than the transaction timeout
	// (or none was open), so the coordinator had no reason to abort it; or
	// when the coordinator shows an epoch we never held in use (a newer
	// epoch than one bump above ours, or a transaction of the next epoch).
	FenceTakenOver FenceCause = iota
	// FenceTimedOut: the coordinator aborted our transaction after it stayed
	// open past the transaction timeout, and bumped the epoch once. Nobody
	// else holds the id: taking it back (Init) and recovering is safe.
	FenceTimedOut
	// FenceUndecided: our transaction had been open past the timeout, so the
	// coordinator may have aborted it, but its state cannot confirm that
	// nobody initialised the id since (DescribeTransactions failed, is not
	// supported, or shows an idle id one epoch above ours, which both
	// causes leave behind on some brokers).
	FenceUndecided
)

func (c FenceCause) String() string {
	switch c {
	case FenceTimedOut:
		return "timed_out"
	case FenceUndecided:
		return "undecided"
	default:
		return "taken_over"
	}
}

// TxnState is the transaction coordinator's view of a transactional id, from
// DescribeTransactions.
type TxnState struct {
	// State is the coordinator's name: Empty, Ongoing, PrepareCommit,
	// PrepareAbort, CompleteCommit, CompleteAbort, PrepareEpochFence, Dead.
	State         string
	ProducerID    int64
	ProducerEpoch int16
	// TimeoutMs is the transaction timeout the current owner registered.
	TimeoutMs int32
	// StartMs is the broker time the open transaction started, -1 if none.
	StartMs int64
}

// FencedError is the ErrFenced of a producer whose epoch was bumped
// (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH): errors.Is(err, ErrFenced) holds
// and errors.As finds the *Error too. Cause says who bumped it.
//
// How it is decided: the coordinator aborts a transaction only after it has
// been open for the transaction timeout. The producer notes when it sent the
// first request of a transaction and keeps that time until it knows the
// transaction ended. If the epoch was bumped before the timeout could have
// passed (or with no transaction open), another producer did it:
// FenceTakenOver, without asking. Otherwise it asks the coordinator with
// DescribeTransactions: our producer id one epoch up in an aborting or
// aborted state is the coordinator's own timeout abort (FenceTimedOut); an
// epoch two or more above ours, another producer id, or a transaction of the
// next epoch is someone else's (FenceTakenOver); anything else is
// FenceUndecided.
//
// One race remains: an instance whose InitProducerID finds our timed-out
// transaction still open makes the coordinator abort it and bump the epoch
// once before its own retried InitProducerID bumps it again, and a describe
// between the two reads FenceTimedOut. A producer that then takes the id back
// is fenced again while its transaction is young, which is FenceTakenOver.
type FencedError struct {
	Err *Error
	// Cause is the verdict; see FenceCause.
	Cause FenceCause
	// ProducerID and ProducerEpoch are ours, the ones that were fenced.
	ProducerID    int64
	ProducerEpoch int16
	// OpenFor is how long our transaction had been open at the coordinator
	// by our clock (from the send of its first request), 0 when none was.
	OpenFor time.Duration
	// Timeout is our transaction timeout.
	Timeout time.Duration
	// Txn is the coordinator's state when it was asked, nil otherwise;
	// DescribeErr says why asking failed.
	Txn         *TxnState
	DescribeErr error
}

func (e *FencedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

func (e *FencedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sink: %s: producer id %d epoch %d fenced (%v): ", e.Err.TransactionalID, e.ProducerID, e.ProducerEpoch, e.Err.Code)
	open := "no transaction was open"
	if e.OpenFor > 0 {
		open = fmt.Sprintf("our transaction had been open %v (transaction timeout %v)", e.OpenFor.Round(time.Millisecond), e.Timeout)
	}
	switch e.Cause {
	case FenceTimedOut:
		fmt.Fprintf(&b, "the transaction coordinator aborted our transaction because it stayed open past the transaction timeout, and bumped the epoch: %s", open)
	case FenceTakenOver:
		fmt.Fprintf(&b, "another producer initialised the transactional id: %s", open)
		if e.OpenFor < e.Timeout {
			b.WriteString(", so the coordinator had no cause to abort it")
		}
	default:
		fmt.Fprintf(&b, "either the transaction coordinator aborted our transaction after the transaction timeout, or another producer initialised the transactional id; %s", open)
	}
	switch {
	case e.Txn != nil:
		fmt.Fprintf(&b, "; coordinator: state %s, producer id %d, epoch %d", e.Txn.State, e.Txn.ProducerID, e.Txn.ProducerEpoch)
	case e.DescribeErr != nil:
		fmt.Fprintf(&b, "; asking the coordinator failed: %v", e.DescribeErr)
	}
	return b.String()
}

// explainFence turns a fenced *Error about our producer epoch into a
// *FencedError with its cause; other errors come back unchanged. It may ask
// the coordinator (one DescribeTransactions, bounded by RequestTimeout).
func (p *Producer) explainFence(ctx context.Context, err error) error {
	var e *Error
	var fe *FencedError
	if errors.As(err, &fe) || !errors.As(err, &e) || e.Class != ClassFenced ||
		(e.Code != kafka.ProducerFenced && e.Code != kafka.InvalidProducerEpoch) {
		return err
	}
	fe = &FencedError{Err: e, ProducerID: p.pid, ProducerEpoch: p.epoch, Timeout: p.cfg.TransactionTimeout}
	if !p.txnStart.IsZero() {
		fe.OpenFor = max(time.Since(p.txnStart), time.Nanosecond)
	}
	if fe.OpenFor < fe.Timeout {
		fe.Cause = FenceTakenOver
	} else {
		fe.Txn, fe.DescribeErr = p.DescribeTransaction(context.WithoutCancel(ctx))
		fe.Cause = judgeFence(p.pid, p.epoch, fe.Txn)
	}
	p.log.Warn("sink: producer fenced", "cause", fe.Cause.String(), "err", fe)
	return fe
}

// judgeFence decides the cause of a fence of producer pid at epoch from the
// coordinator's state (nil: unknown), given that our transaction had been
// open past the timeout.
func judgeFence(pid int64, epoch int16, st *TxnState) FenceCause {
	switch {
	case st == nil:
		return FenceUndecided
	case st.ProducerID != pid, int(st.ProducerEpoch) > int(epoch)+1:
		return FenceTakenOver
	case int(st.ProducerEpoch) != int(epoch)+1:
		return FenceUndecided
	}
	switch st.State {
	case "PrepareAbort", "CompleteAbort", "PrepareEpochFence":
		return FenceTimedOut
	case "Ongoing", "PrepareCommit", "CompleteCommit":
		return FenceTakenOver // a transaction at an epoch we never held
	}
	return FenceUndecided
}

// apiDescribeTransactions is DescribeTransactions' API key (KIP-664, brokers
// 3.0 and later). kafka-go has no type for it, so the exchange below writes
// and reads it with franz-go's kmsg.
const apiDescribeTransactions = 65

// DescribeTransaction asks the transaction coordinator for the state of the
// producer's transactional id (one attempt, after a coordinator lookup if
// none is cached).
func (p *Producer) DescribeTransaction(ctx context.Context) (*TxnState, error) {
	p.joinEarly()
	coord, code, err := p.coordinator(ctx, "")
	if err == nil && code != 0 {
		err = code
	}
	if err != nil {
		return nil, fmt.Errorf("describe transactions: %w", err)
	}
	clientID := "dedupstream"
	if t, ok := p.rt.(*kafka.Transport); ok && t.ClientID != "" {
		clientID = t.ClientID
	}
	x := &describeTxn{id: p.cfg.TransactionalID, clientID: clientID}
	if _, err := p.send(ctx, coord, x); err != nil {
		p.forgetCoordinator("")
		return nil, fmt.Errorf("describe transactions: %w", err)
	}
	if x.code != 0 {
		if isCoordinatorCode(x.code) {
			p.forgetCoordinator("")
		}
		return nil, fmt.Errorf("describe transactions: %w", x.code)
	}
	return x.state, nil
}

// describeTxn is a DescribeTransactions v0 exchange on a broker connection
// (see routed): the request is written and the answer read with kmsg.
type describeTxn struct {
	id       string
	clientID string

	state *TxnState
	code  kafka.Error
}

var (
	_ protocol.RawExchanger = (*describeTxn)(nil)
	_ protocol.Message      = (*describeTxnResponse)(nil)
)

var describeCorrelation atomic.Int32

func (x *describeTxn) ApiKey() protocol.ApiKey { return apiDescribeTransactions }

// Required always asks for the raw exchange: kafka-go cannot encode this
// message. RawExchange itself refuses brokers that lack the API.
func (x *describeTxn) Required(versions map[protocol.ApiKey]int16) bool {
	_, ok := versions[apiDescribeTransactions]
	if !ok {
		x.code = -1
	}
	return true
}

// errNoDescribe reports a broker without DescribeTransactions (before 3.0).
var errNoDescribe = errors.New("the broker does not support DescribeTransactions (Kafka 3.0 or later)")

func (x *describeTxn) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	if x.code == -1 {
		x.code = 0
		return nil, errNoDescribe
	}
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{x.id}
	id := describeCorrelation.Add(1)
	buf := kmsg.NewRequestFormatter(kmsg.FormatterClientID(x.clientID)).AppendRequest(nil, req, id)
	if _, err := rw.Write(buf); err != nil {
		return nil, err
	}
	var hdr [8]byte
	if _, err := io.ReadFull(rw, hdr[:]); err != nil {
		return nil, err
	}
	size := int(int32(binary.BigEndian.Uint32(hdr[:]))) - 4
	if got := int32(binary.BigEndian.Uint32(hdr[4:])); got != id {
		return nil, fmt.Errorf("describe transactions: correlation id %d, want %d", got, id)
	}
	if size < 1 || size > 1<<20 {
		return nil, fmt.Errorf("describe transactions: response of %d bytes", size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(rw, body); err != nil {
		return nil, err
	}
	// The flexible response header ends with its tagged fields: none are
	// defined, so a count of 0 is expected.
	if body[0] != 0 {
		return nil, fmt.Errorf("describe transactions: unexpected tagged header fields")
	}
	res := kmsg.NewPtrDescribeTransactionsResponse()
	res.Version = req.Version
	if err := res.ReadFrom(body[1:]); err != nil {
		return nil, fmt.Errorf("describe transactions: %w", err)
	}
	for _, st := range res.TransactionStates {
		if st.TransactionalID != x.id {
			continue
		}
		if st.ErrorCode != 0 {
			x.code = kafka.Error(st.ErrorCode)
			break
		}
		x.state = &TxnState{State: st.State, ProducerID: st.ProducerID, ProducerEpoch: st.ProducerEpoch,
			TimeoutMs: st.TimeoutMillis, StartMs: st.StartTimestamp}
	}
	if x.state == nil && x.code == 0 {
		return nil, errors.New("describe transactions: the answer lacks our transactional id")
	}
	return &describeTxnResponse{}, nil
}

type describeTxnResponse struct{}

func (*describeTxnResponse) ApiKey() protocol.ApiKey { return apiDescribeTransactions }
