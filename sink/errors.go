package sink

import (
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/kafka-go"
)

// ErrFenced reports that another producer with the same transactional id
// (or a newer consumer-group generation) has taken over: this producer's
// writes and commits are rejected for good. The stage must stop; it must not
// call Init again unless it has been given the partition anew, because Init
// would in turn fence the new owner.
//
// Match it with errors.Is; the error itself is an *Error naming the broker's
// error code (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTION_COORDINATOR_FENCED,
// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID).
var ErrFenced = errors.New("sink: producer fenced")

// ErrState reports a call out of order, such as Produce without Begin, or
// Commit after an error in the same transaction (which must be aborted).
var ErrState = errors.New("sink: call out of order")

// Class says how the caller should react to an error of the Producer.
type Class uint8

const (
	// ClassFatal: retrying cannot help (configuration, authorization,
	// oversize or corrupt batch, unsupported broker). Abort the transaction
	// and stop the job with the error.
	ClassFatal Class = iota
	// ClassRetriable: a transient condition outlasted the call's retry
	// budget (RetryTimeout) with nothing of unknown outcome. Abort the
	// transaction and run the cycle again later.
	ClassRetriable
	// ClassFenced: see ErrFenced. Stop the stage.
	ClassFenced
	// ClassAmbiguous: the outcome of a produce or of EndTxn is unknown, or
	// the broker's view of the producer no longer matches ours. Call Abort,
	// which re-initialises the producer (fencing any request of the old
	// epoch still in flight and settling the open transaction), then re-run
	// recovery: the transaction may or may not have committed.
	ClassAmbiguous
)

func (c Class) String() string {
	switch c {
	case ClassRetriable:
		return "retriable"
	case ClassFenced:
		return "fenced"
	case ClassAmbiguous:
		return "ambiguous"
	default:
		return "fatal"
	}
}

// Error is an error of one producer operation. Errors of ClassAmbiguous come
// as *AmbiguousError wrapping an *Error.
type Error struct {
	// Op names the request: "init producer id", "add partitions to txn",
	// "produce", "add offsets to txn", "txn offset commit", "end txn",
	// "find coordinator", "metadata".
	Op string
	// TransactionalID is the producer's transactional id.
	TransactionalID string
	// Topic and Partition name the partition concerned, if any (Partition
	// is -1 otherwise). For TxnOffsetCommit Topic is the consumer group.
	Topic     string
	Partition int32
	// Code is the broker's error code, 0 when the failure was not a broker
	// answer (a network error or a timeout).
	Code kafka.Error
	// Class is how to react; see Class.
	Class Class
	// Attempts is how many requests were sent.
	Attempts int
	// Err is the cause: Code as an error, or the transport's error.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("sink: ")
	b.WriteString(e.TransactionalID)
	b.WriteString(": ")
	b.WriteString(e.Op)
	if e.Topic != "" {
		b.WriteByte(' ')
		b.WriteString(e.Topic)
		if e.Partition >= 0 {
			fmt.Fprintf(&b, "/%d", e.Partition)
		}
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (%d attempts)", e.Attempts)
	}
	fmt.Fprintf(&b, ": %s: %v", e.Class, e.Err)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrFenced) true for fenced errors.
func (e *Error) Is(target error) bool { return target == ErrFenced && e.Class == ClassFenced }

// AmbiguousError reports that the outcome of a request is unknown: a produce
// or EndTxn timed out, its connection broke, or the broker's sequence or
// producer state disagrees with ours. Records of the open transaction may
// or may not be in the log, and the transaction may or may not commit.
// The caller must call Abort and re-run recovery from the output topic.
type AmbiguousError struct {
	Err *Error
}

func (e *AmbiguousError) Error() string { return e.Err.Error() }

func (e *AmbiguousError) Unwrap() error { return e.Err }

// ClassOf classifies any error returned by a Producer. A nil error, an
// ErrState misuse and unknown errors are ClassFatal.
func ClassOf(err error) Class {
	var amb *AmbiguousError
	var e *Error
	switch {
	case err == nil:
		return ClassFatal
	case errors.As(err, &amb):
		return ClassAmbiguous
	case errors.As(err, &e):
		return e.Class
	default:
		return ClassFatal
	}
}

// classifyCode maps a broker error code to a class. Retriable codes are
// retried inside the call; what an exhausted retry means depends on the
// request (see Producer).
func classifyCode(code kafka.Error) Class {
	switch code {
	case kafka.ConcurrentTransactions,
		kafka.GroupLoadInProgress,          // COORDINATOR_LOAD_IN_PROGRESS
		kafka.GroupCoordinatorNotAvailable, // COORDINATOR_NOT_AVAILABLE
		kafka.NotCoordinatorForGroup,       // NOT_COORDINATOR
		kafka.NotLeaderForPartition,
		kafka.LeaderNotAvailable,
		kafka.UnknownTopicOrPartition,
		kafka.RequestTimedOut,
		kafka.BrokerNotAvailable,
		kafka.ReplicaNotAvailable,
		kafka.NetworkException,
		kafka.NotEnoughReplicas,
		kafka.NotEnoughReplicasAfterAppend,
		kafka.KafkaStorageError,
		kafka.FencedLeaderEpoch,
		kafka.UnknownLeaderEpoch,
		kafka.RebalanceInProgress,
		kafka.ThrottlingQuotaExceeded:
		return ClassRetriable
	case kafka.ProducerFenced,
		kafka.InvalidProducerEpoch,
		kafka.TransactionalIDAuthorizationFailed,
		kafka.TransactionCoordinatorFenced,
		kafka.IllegalGeneration,
		kafka.UnknownMemberId,
		kafka.FencedInstanceID:
		return ClassFenced
	case kafka.OutOfOrderSequenceNumber,
		kafka.UnknownProducerId,
		kafka.InvalidProducerIDMapping,
		kafka.InvalidTransactionState:
		return ClassAmbiguous
	default:
		return ClassFatal
	}
}

// isCoordinatorCode reports codes after which the coordinator must be looked
// up again.
func isCoordinatorCode(code kafka.Error) bool {
	return code == kafka.NotCoordinatorForGroup || code == kafka.GroupCoordinatorNotAvailable
}

// isLeaderCode reports produce codes after which the partition leader must
// be looked up again.
func isLeaderCode(code kafka.Error) bool {
	switch code {
	case kafka.NotLeaderForPartition, kafka.LeaderNotAvailable, kafka.UnknownTopicOrPartition,
		kafka.FencedLeaderEpoch, kafka.UnknownLeaderEpoch, kafka.KafkaStorageError,
		kafka.BrokerNotAvailable, kafka.ReplicaNotAvailable:
		return true
	}
	return false
}
