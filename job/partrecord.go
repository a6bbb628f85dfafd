package job

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dedupstream/dedupstream/internal/backoff"
	"github.com/segmentio/kafka-go"
)

// The partition count N is recorded in three places. The committed
// offsets' metadata and the stores' checkpoints (partcount.go) are lost in
// ordinary operation: a group's offsets expire once it has stayed empty
// past the brokers' offsets.retention.minutes (7 days by default), and an
// instance that starts on an empty disk has no checkpoint. After both, a
// start under a grown topic would restore each store from its own output
// partition, laid out under the old N, and pass replays of moved keys as
// new. The third place does not expire: a compacted topic of one
// partition, <job.id>-partitions, where N is recorded in decimal under key
// "partitions". Run claims it with the rest of the layout when the topic
// holds none (recordclaim.go) and refuses to start when it holds another
// N; Migrate writes the new N last. Both refuse a topic that retention may
// empty (partretention.go).

// partitionsRecordKey is the key of the record that holds N.
const partitionsRecordKey = "partitions"

// PartitionsTopic is the topic in which job id records its partition
// count.
func PartitionsTopic(jobID string) string { return jobID + "-partitions" }

// checkPartitionsRecord refuses to start when the partitions topic records
// another count than the topics have (n). recs holds no count only when the
// job may not use the topic (checkLayoutRecords warned).
func (j *Job) checkPartitionsRecord(recs jobRecords, n int) error {
	r, ok := recs[partitionsRecordKey]
	if !ok {
		return nil
	}
	recorded, err := parsePartitionsRecord(PartitionsTopic(j.cfg.Job.ID), r.offset, r.value)
	if err != nil || recorded == n {
		return err
	}
	return fmt.Errorf("%w: input.topics: topic %q records that job %q runs with %d partitions, the topics %v now have %d: "+
		"keys moved to other partitions and their state did not, so repeats would pass. Stop every instance and run "+
		"`dedupstream migrate --config FILE` (it builds each partition's state from the output's window under %d partitions; see docs/scaling.md), "+
		"give the topics %d partitions again, or start under a new job.id",
		ErrPartitionCount, PartitionsTopic(j.cfg.Job.ID), j.cfg.Job.ID, recorded, j.topics, n, n, recorded)
}

// errPartitionsTopicRefused marks an authorization refusal on the
// partitions topic.
var errPartitionsTopicRefused = errors.New("not authorized")

// readPartitionsRecord returns the count in the partitions topic's last
// "partitions" record; 0 when the topic or the record does not exist.
func (j *Job) readPartitionsRecord(ctx context.Context) (int, error) {
	topic := PartitionsTopic(j.cfg.Job.ID)
	v, off, err := j.readJobRecord(ctx, partitionsRecordKey)
	if err != nil || v == nil {
		return 0, err
	}
	return parsePartitionsRecord(topic, off, v)
}

// parsePartitionsRecord returns the count in the "partitions" record v,
// read at offset off of topic (-1: unknown).
func parsePartitionsRecord(topic string, off int64, v []byte) (int, error) {
	n, err := strconv.Atoi(string(v))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: topic %q, offset %d: the partition count record holds %q, not a count: write the topics' count there (key %q) or delete the topic",
			ErrTopics, topic, off, v, partitionsRecordKey)
	}
	return n, nil
}

// writePartitionsRecord records n in the partitions topic.
func (j *Job) writePartitionsRecord(ctx context.Context, n int) error {
	if err := j.writeJobRecord(ctx, partitionsRecordKey, strconv.Itoa(n)); err != nil {
		return err
	}
	j.log.Info("recorded the partition count", "topic", PartitionsTopic(j.cfg.Job.ID), "partitions", n)
	return nil
}

// writeJobRecord writes value under key to the partitions topic, creating
// the topic when it does not exist. It overwrites: Migrate, run with every
// instance stopped, records the new layout with it; a start records a
// missing one with claimJobRecords instead.
func (j *Job) writeJobRecord(ctx context.Context, key, value string) error {
	topic := PartitionsTopic(j.cfg.Job.ID)
	return j.retryAdmin(ctx, "record the "+key, func() error {
		if err := j.createJobTopic(ctx); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		pres, err := j.client.Produce(rctx, &kafka.ProduceRequest{
			Topic: topic, Partition: 0, RequiredAcks: kafka.RequireAll,
			Records: kafka.NewRecordReader(kafka.Record{Key: kafka.NewBytes([]byte(key)), Value: kafka.NewBytes([]byte(value))}),
		})
		if err == nil {
			err = pres.Error
		}
		if err != nil {
			return fmt.Errorf("write %q to topic %q: %w", value, topic, err)
		}
		return nil
	})
}

// createJobTopic creates the partitions topic (one partition, compacted,
// the cluster's default replication) when it does not exist.
func (j *Job) createJobTopic(ctx context.Context) error {
	topic := PartitionsTopic(j.cfg.Job.ID)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cres, err := j.client.CreateTopics(rctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: topic, NumPartitions: 1, ReplicationFactor: -1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "compact"}},
	}}})
	if err == nil {
		if err = cres.Errors[topic]; errors.Is(err, kafka.TopicAlreadyExists) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("create topic %q: %w", topic, err)
	}
	return nil
}

// retryAdmin runs op until it succeeds, retrying transient failures (a new
// topic without a leader yet, a moving leader, a lost connection) with
// backoff for the job's retry timeout. A refusal for lack of rights ends it
// with errPartitionsTopicRefused; a wrong record ends it at once.
func (j *Job) retryAdmin(ctx context.Context, what string, op func() error) error {
	b := &backoff.Backoff{Base: j.opts.Backoff, Limit: j.opts.MaxBackoff}
	deadline := time.Now().Add(max(j.retryTimeout(), 10*time.Second))
	for {
		err := op()
		switch {
		case err == nil, errors.Is(err, ErrTopics):
			return err
		case errors.Is(err, kafka.TopicAuthorizationFailed), errors.Is(err, kafka.ClusterAuthorizationFailed),
			errors.Is(err, kafka.TransactionalIDAuthorizationFailed):
			return fmt.Errorf("%s: %w: %w", what, errPartitionsTopicRefused, err)
		}
		if rerr := j.refusal(ctx, err); rerr != nil {
			return rerr
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("job: %s: %w", what, err)
		}
		j.log.Warn(what+" failed, retrying", "err", err)
		if err := b.Sleep(ctx); err != nil {
			return err
		}
	}
}
