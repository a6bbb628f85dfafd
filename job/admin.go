package job

// The Kafka admin look-ups of the job, in one place: the topic check at
// start-up (partition counts, the repartition topic) and the consumer
// groups' committed offsets read in recovery.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dedupstream/dedupstream/internal/backoff"
	"github.com/dedupstream/dedupstream/internal/kafkaauth"
	"github.com/segmentio/kafka-go"
)

// layout is what Run learnt about the topics at start-up.
type layout struct {
	partitions    int // of the stages' input topics, the output topic and the job
	dlqPartitions int
	dlqMaxBytes   int            // the DLQ topic's max.message.bytes
	outMaxBytes   int            // the output topic's max.message.bytes
	raw           map[string]int // partition counts of the raw topics
}

// checkTopics verifies the promise of the partitioning mode. Input mode:
// the output topic has exactly as many partitions as every raw topic (one
// per stage). Repartition mode: the raw topics exist with any partition
// count, and the repartition topic has the output's count; it is created
// so when it does not exist. In both, every owned partition exists and the
// DLQ topic exists.
func (j *Job) checkTopics(ctx context.Context) (layout, error) {
	names := append([]string{j.cfg.Output.Topic, j.cfg.Output.DLQTopic}, j.raw...)
	repartition := j.cfg.Input.Partitioning == "repartition"
	if repartition {
		names = append(names, j.topics[0])
	}
	var counts map[string]int
	b := &backoff.Backoff{Base: j.opts.Backoff, Limit: j.opts.MaxBackoff}
	deadline := time.Now().Add(max(j.retryTimeout(), 10*time.Second))
	created := false
	for {
		var err error
		counts, err = j.partitionCounts(ctx, names)
		if err == nil && repartition && counts[j.topics[0]] == 0 && counts[j.cfg.Output.Topic] > 0 {
			if created {
				err = fmt.Errorf("created repartition topic %q is not in the metadata yet", j.topics[0])
			} else if err = j.createRepartitionTopic(ctx, counts[j.cfg.Output.Topic]); err == nil {
				created = true
				continue // read the counts again
			}
		}
		if err == nil {
			break
		}
		if err := j.refusal(ctx, err); err != nil {
			return layout{}, err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return layout{}, fmt.Errorf("job: read topic metadata: %w", err)
		}
		j.log.Warn("reading topic metadata failed, retrying", "err", err)
		if err := b.Sleep(ctx); err != nil {
			return layout{}, err
		}
	}
	var problems []string
	missing := func(field, topic string) {
		if counts[topic] == 0 {
			problems = append(problems, fmt.Sprintf("%s: topic %q does not exist", field, topic))
		}
	}
	missing("output.topic", j.cfg.Output.Topic)
	missing("output.dlq_topic", j.cfg.Output.DLQTopic)
	out := counts[j.cfg.Output.Topic]
	lay := layout{partitions: out, dlqPartitions: counts[j.cfg.Output.DLQTopic], raw: map[string]int{}}
	for i, t := range j.raw {
		missing(fmt.Sprintf("input.topics[%d]", i), t)
		lay.raw[t] = counts[t]
		if in := counts[t]; !repartition && in > 0 && out > 0 && in != out {
			problems = append(problems, fmt.Sprintf("input.topics[%d]: raw topic %q has %d partitions, output topic %q has %d: input mode needs one output partition per raw partition (or use partitioning: repartition)", i, t, in, j.cfg.Output.Topic, out))
		}
	}
	if rt := j.topics[0]; repartition && out > 0 && counts[rt] != out {
		problems = append(problems, fmt.Sprintf("input.partitioning: repartition topic %q has %d partitions, output topic %q has %d: they must match", rt, counts[rt], j.cfg.Output.Topic, out))
	}
	for i, p := range j.cfg.Assignment.Partitions {
		if out > 0 && p >= out {
			problems = append(problems, fmt.Sprintf("assignment.partitions[%d]: partition %d does not exist: output topic %q has %d partitions", i, p, j.cfg.Output.Topic, out))
		}
	}
	if len(problems) > 0 {
		return layout{}, fmt.Errorf("%w:\n%s", ErrTopics, strings.Join(problems, "\n"))
	}
	lay.dlqMaxBytes = j.maxMessageBytes(ctx, "DLQ", j.cfg.Output.DLQTopic)
	lay.outMaxBytes = j.maxMessageBytes(ctx, "output", j.cfg.Output.Topic)
	return lay, nil
}

// refusal returns an ErrAuth error when err, or a probe of the bootstrap
// brokers, shows that the brokers refuse the job's TLS or SASL; nil when
// the failure may pass.
func (j *Job) refusal(ctx context.Context, err error) error {
	if kafkaauth.Refused(err) {
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	for _, b := range j.cfg.Kafka.Brokers {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		perr := kafkaauth.Probe(pctx, j.opts.Dialer, b)
		cancel()
		if perr != nil {
			return fmt.Errorf("%w: %w", ErrAuth, perr)
		}
	}
	return nil
}

// createRepartitionTopic creates the repartition topic with n partitions
// and the cluster's default replication. Another instance creating it at
// the same moment is fine.
func (j *Job) createRepartitionTopic(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	topic := j.topics[0]
	res, err := j.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: n, ReplicationFactor: -1}},
	})
	if err != nil {
		return fmt.Errorf("create repartition topic %q: %w", topic, err)
	}
	if err := res.Errors[topic]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return fmt.Errorf("create repartition topic %q: %w", topic, err)
	}
	j.log.Info("created the repartition topic", "topic", topic, "partitions", n)
	return nil
}

func (j *Job) partitionCounts(ctx context.Context, names []string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md, err := j.client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for _, t := range md.Topics {
		if t.Error != nil {
			if errors.Is(t.Error, kafka.UnknownTopicOrPartition) {
				continue
			}
			return nil, fmt.Errorf("topic %q: %w", t.Name, t.Error)
		}
		counts[t.Name] = len(t.Partitions)
	}
	return counts, nil
}

func (j *Job) retryTimeout() time.Duration {
	if j.opts.RetryTimeout > 0 {
		return j.opts.RetryTimeout
	}
	return 30 * time.Second
}

// committedOffsets returns group's committed offset of partition p of each
// of topics, in their order; -1 where none is committed.
func (j *Job) committedOffsets(ctx context.Context, group string, topics []string, p int) ([]int64, error) {
	offsets, _, err := j.committedOffsetsMeta(ctx, group, topics, p)
	return offsets, err
}

// committedOffsetsMeta is committedOffsets with the metadata committed with
// each offset ("" where none is committed).
func (j *Job) committedOffsetsMeta(ctx context.Context, group string, topics []string, p int) ([]int64, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{}}
	for _, t := range topics {
		req.Topics[t] = []int{p}
	}
	res, err := j.client.OffsetFetch(ctx, req)
	offsets, meta := make([]int64, len(topics)), make([]string, len(topics))
	for i := range offsets {
		offsets[i] = -1
	}
	if err != nil {
		return nil, nil, err
	}
	if errors.Is(res.Error, kafka.GroupIdNotFound) {
		return offsets, meta, nil // kfake's answer for a group that never committed
	}
	if res.Error != nil {
		return nil, nil, fmt.Errorf("offset fetch group %q: %w", group, res.Error)
	}
	for i, t := range topics {
		for _, op := range res.Topics[t] {
			if op.Partition != p {
				continue
			}
			if op.Error != nil {
				return nil, nil, fmt.Errorf("offset fetch group %q %s/%d: %w", group, t, p, op.Error)
			}
			offsets[i] = op.CommittedOffset
			if op.CommittedOffset >= 0 {
				meta[i] = op.Metadata
			}
		}
	}
	return offsets, meta, nil
}

// groupOffsets returns the job group's committed offsets of partitions
// [0, n) of every stage input topic, with their metadata (where the
// partition count is recorded); nil, nil when the group never committed.
// A group coordinator that moves or is still loading (NOT_COORDINATOR,
// COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS: a fresh or
// restarted cluster) is asked again with backoff until ctx ends.
func (j *Job) groupOffsets(ctx context.Context, n int) (map[string][]kafka.OffsetFetchPartition, error) {
	req := &kafka.OffsetFetchRequest{GroupID: j.cfg.Job.ID, Topics: map[string][]int{}}
	for _, t := range j.topics {
		for p := range n {
			req.Topics[t] = append(req.Topics[t], p)
		}
	}
	b := &backoff.Backoff{Base: j.opts.Backoff, Limit: j.opts.MaxBackoff}
	for {
		res, err := j.client.OffsetFetch(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("read committed offsets of group %q: %w", j.cfg.Job.ID, err)
		}
		if errors.Is(res.Error, kafka.GroupIdNotFound) {
			return nil, nil // kfake's answer for a group that never committed
		}
		switch {
		case res.Error == nil:
			return res.Topics, nil
		case errors.Is(res.Error, kafka.NotCoordinatorForGroup), errors.Is(res.Error, kafka.GroupCoordinatorNotAvailable),
			errors.Is(res.Error, kafka.GroupLoadInProgress):
			j.log.Warn("reading the group's committed offsets: the group coordinator is moving or loading, retrying", "err", res.Error)
			if b.Sleep(ctx) == nil {
				continue
			}
		}
		return nil, fmt.Errorf("read committed offsets of group %q: %w", j.cfg.Job.ID, res.Error)
	}
}

// describeTopicConfig reads one configuration value of topic (its own or
// the broker default it inherits) with DescribeConfigs.
func (j *Job) describeTopicConfig(ctx context.Context, topic, name string) (string, error) {
	cfgs, err := j.describeTopicConfigs(ctx, topic, name)
	if err != nil {
		return "", err
	}
	v, ok := cfgs[name]
	if !ok {
		return "", fmt.Errorf("%s missing from the answer", name)
	}
	return v, nil
}

// describeTopicConfigs reads configuration values of topic (its own or the
// broker defaults it inherits) with one DescribeConfigs request; a name the
// brokers do not answer is missing from the map.
func (j *Job) describeTopicConfigs(ctx context.Context, topic string, names ...string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := j.client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: names,
	}}})
	if err != nil {
		return nil, err
	}
	cfgs := make(map[string]string, len(names))
	for _, r := range res.Resources {
		if r.Error != nil {
			return nil, r.Error
		}
		for _, e := range r.ConfigEntries {
			cfgs[e.ConfigName] = e.ConfigValue
		}
	}
	return cfgs, nil
}
