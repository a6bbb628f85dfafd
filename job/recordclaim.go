package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/sink"
)

// Instances of a new job may start at the same moment, each find the
// partitions topic empty and each write its own partition count or route
// (say one saw 4 partitions, the other 6 after an operator grew the topics
// in between). Kafka has no conditional produce: plain writes would both
// land, the later one would win in the topic while the earlier writer ran
// on under its own count, and two instances would run one job id under two
// layouts. So the first record of a key is claimed in a transaction of the
// transactional id "<job.id>-partitions": InitProducerID, read the topic
// (read_committed), write the record only when it is still missing,
// commit. A commit succeeds only when no other instance called
// InitProducerID on that id since ours, and an InitProducerID waits until
// a transaction that is committing has its markers written, so a claimer
// reads every record committed before it could write: of instances racing
// from an empty topic exactly one writes, and the others read its record
// and compare (a different one: refused). A claimer fenced meanwhile
// starts again from InitProducerID.

// claimTransactionalID is the transactional id of the claims: stage ids
// end in a partition number and route ids in "-route-...", so it is the
// job's own.
func claimTransactionalID(jobID string) string { return jobID + "-partitions" }

// claimJobRecord writes value under key to the partitions topic unless a
// record of key is there, as one transaction against all other claimers,
// and returns the value in force: ours, or the one another instance wrote.
func (j *Job) claimJobRecord(ctx context.Context, key, value string) ([]byte, error) {
	topic := PartitionsTopic(j.cfg.Job.ID)
	if err := j.retryAdmin(ctx, "create topic "+topic, func() error { return j.createJobTopic(ctx) }); err != nil {
		return nil, err
	}
	err := j.retryAdmin(ctx, "record the "+key, func() error {
		prod, err := sink.NewProducer(sink.Config{
			Client:             j.client,
			TransactionalID:    claimTransactionalID(j.cfg.Job.ID),
			TransactionTimeout: max(j.cfg.Kafka.TransactionTimeout, 10*time.Second),
			RequestTimeout:     j.opts.RequestTimeout,
			RetryTimeout:       j.opts.RetryTimeout,
			Dialer:             j.dialer,
			Logger:             j.log,
		})
		if err != nil {
			return err
		}
		defer prod.Close()
		if err := prod.Init(ctx); err != nil {
			return fmt.Errorf("claim the %s record: %w", key, err)
		}
		v, _, err := j.readJobRecord(ctx, key)
		if err != nil || v != nil {
			return err // recorded by another instance (or an earlier run)
		}
		if err := prod.Begin(); err != nil {
			return err
		}
		j.opts.failpoint(testhook.JobRecordClaim)
		_, err = prod.Produce(ctx, topic, 0, []sink.Record{{Key: []byte(key), Value: []byte(value)}})
		if err == nil {
			err = prod.Commit(ctx)
		}
		if err != nil {
			if aerr := prod.Abort(ctx); aerr != nil && !errors.Is(err, sink.ErrFenced) {
				j.log.Debug("abort of a failed claim failed", "err", aerr)
			}
			if errors.Is(err, sink.ErrFenced) {
				j.log.Info("another instance claimed the "+key+" record at the same time; reading it", "topic", topic)
			}
			return fmt.Errorf("claim the %s record in topic %q: %w", key, topic, err)
		}
		j.log.Info("recorded the "+key, "topic", topic, key, value)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// EndTxn returns before the commit markers are written, and a
	// read_committed read stops at the first open transaction: read until
	// the record shows.
	var v []byte
	err = j.retryAdmin(ctx, "read back the "+key+" record", func() error {
		v, _, err = j.readJobRecord(ctx, key)
		if err == nil && v == nil {
			err = fmt.Errorf("the %s record claimed in topic %q is not readable yet", key, topic)
		}
		return err
	})
	return v, err
}
