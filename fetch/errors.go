package fetch

import (
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// OutOfRangeError is returned by Fetch under OutOfRangeFail when the position
// is outside the partition's log. Earliest and Latest are the valid range at
// the time of the error: a fetch position p is valid when
// Earliest <= p <= Latest.
type OutOfRangeError struct {
	Topic     string
	Partition int
	Offset    int64 // the rejected position
	Earliest  int64 // log start offset
	Latest    int64 // high watermark (log end as consumers see it)
}

func (e *OutOfRangeError) Error() string {
	return fmt.Sprintf("fetch: %s[%d]: offset %d out of range [%d, %d] (out-of-range policy is fail)",
		e.Topic, e.Partition, e.Offset, e.Earliest, e.Latest)
}

// Unwrap lets errors.Is(err, kafka.OffsetOutOfRange) match.
func (e *OutOfRangeError) Unwrap() error { return kafka.OffsetOutOfRange }

// errNoPosition is returned by Fetch before the first SetPosition.
var errNoPosition = errors.New("no position: call SetPosition first")

// retriable marks an error the retry loop may retry after refreshing the
// partition leader.
type retriable struct{ err error }

func (e *retriable) Error() string { return e.err.Error() }
func (e *retriable) Unwrap() error { return e.err }

func retry(err error) error { return &retriable{err} }

func isRetriable(err error) bool {
	var r *retriable
	return errors.As(err, &r)
}

// partitionError turns a partition-level error code of a Fetch, Metadata or
// ListOffsets response into an error, retriable when a metadata refresh and
// another attempt can fix it.
func partitionError(code int16) error {
	switch e := kafka.Error(code); e {
	case 0:
		return nil
	case kafka.NotLeaderForPartition, // leader moved
		kafka.LeaderNotAvailable,      // election in progress
		kafka.UnknownTopicOrPartition, // metadata not yet propagated, or partition moved
		kafka.FencedLeaderEpoch,
		kafka.UnknownLeaderEpoch,
		kafka.ReplicaNotAvailable,
		kafka.KafkaStorageError, // log dir offline: the partition moves
		kafka.OffsetNotAvailable,
		kafka.RequestTimedOut,
		kafka.NetworkException,
		kafka.BrokerNotAvailable,
		kafka.NotEnoughReplicas,
		kafka.PreferredLeaderNotAvailable,
		kafka.EligibleLeadersNotAvailable,
		kafka.ThrottlingQuotaExceeded:
		return retry(e)
	default:
		return e
	}
}
