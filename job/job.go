package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/backoff"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/dedupstream/dedupstream/sink"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
)

// Defaults of Options.
const (
	DefaultBackoff         = time.Second
	DefaultMaxBackoff      = 32 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
)

// DLQ header names. Values are UTF-8 text; partition and offset in decimal.
const (
	HeaderReason          = "dedupstream.reason"
	HeaderSourceTopic     = "dedupstream.source.topic"
	HeaderSourcePartition = "dedupstream.source.partition"
	HeaderSourceOffset    = "dedupstream.source.offset"
)

// ErrTopics reports that the cluster's topics do not fit the config: a topic
// is missing, partition counts differ, or an assigned partition does not
// exist. Each problem is on its own line and names the config field.
var ErrTopics = errors.New("job: topics do not fit the config")

// Options are the resources a Job is given rather than configured with.
type Options struct {
	// Logger receives the job's events. The default value discards them.
	Logger *slog.Logger
	// Transport carries every request of the job (fetch, transactions,
	// offsets, metadata). The default value is a new *kafka.Transport with
	// the config's client id.
	Transport *kafka.Transport
	// Dialer opens the consumer group's coordinator connections in
	// assignment mode group (kafka-go's ConsumerGroup does not use the
	// Transport). The default value is a *kafka.Dialer with the config's
	// client id.
	Dialer *kafka.Dialer
	// Clock is the wall clock given to the stages. The default value is
	// time.Now.
	Clock func() time.Time
	// Backoff is the first wait after a transient failure; each further
	// failure in a row doubles it, with jitter, up to MaxBackoff. The
	// default values are 1s and 32s.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// ShutdownTimeout bounds the commit of the open cycle after the run's
	// context is cancelled. The default value is the config's
	// commit.shutdown_timeout (30s).
	ShutdownTimeout time.Duration
	// RequestTimeout bounds one request attempt of the producer and the
	// fetchers; RetryTimeout bounds the retries of one call. Zero selects
	// the defaults of packages sink and fetch.
	RequestTimeout time.Duration
	RetryTimeout   time.Duration
	// Failpoint, when set, is called at named points for crash tests:
	// FailpointProduced (a cycle's records are produced, EndTxn not sent),
	// FailpointCommitted (the transaction committed, the store not yet) and
	// FailpointRestored (one batch restored from the output, more may
	// follow). The default value is nil.
	Failpoint func(name string)
	// StoreFS, when set, returns the file system of partition p's state
	// store; fault tests wrap the real one in pebble's errorfs. The default
	// value is nil: every store uses the operating system's files.
	StoreFS func(p int) vfs.FS
}

// Failpoint names; see Options.Failpoint.
const (
	FailpointProduced  = "produced"
	FailpointCommitted = "committed"
	FailpointRestored  = "restored"
)

func (o *Options) applyDefaults(cfg *config.Config) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Transport == nil {
		o.Transport = &kafka.Transport{ClientID: cfg.Kafka.ClientID, DialTimeout: 10 * time.Second}
	}
	if o.Dialer == nil {
		o.Dialer = &kafka.Dialer{ClientID: cfg.Kafka.ClientID, Timeout: 10 * time.Second}
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Failpoint == nil {
		o.Failpoint = func(string) {}
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = cfg.Commit.ShutdownTimeout
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
}

// Stats are the job's counters since New, counting only cycles whose
// transaction committed (records of aborted cycles are processed again and
// counted then).
type Stats struct {
	pipeline.Counts
	// Restored counts output records read back into a store in recovery.
	Restored uint64
	// Recoveries counts runs of the recovery protocol, the first included;
	// Recovered counts those that completed (the stage then processes
	// input).
	Recoveries, Recovered uint64
	// Misrouted counts records found on another partition than the
	// configured input partitioner gives for their key.
	Misrouted uint64
	// Cycles counts committed transactions.
	Cycles uint64
	// RouteIn counts raw records the route step of repartition mode read
	// in committed cycles; Routed those it wrote to the repartition topic
	// (the rest went to the DLQ and are counted in DeadLettered too).
	RouteIn, Routed uint64
	// Ready is the number of stages that completed recovery and are
	// processing input now; Assigned is the number of partitions this
	// instance owns now (static: the configured ones; group: those of the
	// current generation, 0 between generations).
	Ready, Assigned int
	// Assignment is true while an assignment is current: in static mode
	// after the topic check, in group mode while a generation runs.
	Assignment bool
	// Generations counts consumer group generations joined (group mode).
	Generations uint64
}

// Job runs the stages of the partitions this instance owns.
type Job struct {
	cfg    *config.Config
	opts   Options
	log    *slog.Logger
	client *kafka.Client
	raw    []string // the raw topics
	topics []string // the stages' input: the raw topics, or the repartition topic
	codec  compress.Compression
	partFn func(key []byte, n int) int // nil: no partition check

	mu    sync.Mutex
	stats Stats
	parts map[int]*partMetrics // see metrics.go
}

// New checks that cfg is something this build can run and returns a Job.
// It does no I/O.
func New(cfg *config.Config, opts Options) (*Job, error) {
	if cfg.Assignment.Mode == "static" && len(cfg.Assignment.Partitions) == 0 {
		return nil, errors.New("job: assignment.partitions: no partitions to run")
	}
	opts.applyDefaults(cfg)
	j := &Job{
		cfg:    cfg,
		opts:   opts,
		log:    opts.Logger,
		client: &kafka.Client{Addr: kafka.TCP(cfg.Kafka.Brokers...), Transport: opts.Transport},
		raw:    slices.Clone(cfg.Input.Topics),
		topics: slices.Clone(cfg.Input.Topics),
	}
	if cfg.Input.Partitioning == "repartition" {
		j.topics = []string{RepartitionTopic(cfg)}
	}
	switch cfg.Output.Compression {
	case "gzip":
		j.codec = compress.Gzip
	case "snappy":
		j.codec = compress.Snappy
	case "lz4":
		j.codec = compress.Lz4
	case "zstd":
		j.codec = compress.Zstd
	}
	if slices.Equal(cfg.Dedup.Key, []string{"key"}) {
		j.partFn, _ = partition.PartitionerByName(cfg.Input.Partitioner)
		if cfg.Input.Partitioning == "repartition" {
			j.partFn = partition.Murmur2Partition // how the route step places records
		}
	}
	return j, nil
}

// RepartitionTopic is the topic between the route step and the stages in
// repartition mode: "<job.id>-repartition".
func RepartitionTopic(cfg *config.Config) string { return cfg.Job.ID + "-repartition" }

// Stats returns the counters so far. It may be called while Run runs.
func (j *Job) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stats
}

func (j *Job) addStats(f func(*Stats)) {
	j.mu.Lock()
	f(&j.stats)
	j.mu.Unlock()
}

// stateDir is the state directory of partition p's stage.
func (j *Job) stateDir(p int) string {
	return StateDir(j.cfg.State.Dir, p)
}

// Run checks the topics, then runs one stage per owned partition until ctx
// ends (it then commits or aborts each open cycle and returns nil) or a stage
// fails for good: fenced by another instance (static mode), a fatal broker
// answer, or a failed state store. The first such failure stops every stage
// and is returned. In group mode the owned partitions are those of the
// consumer group's current generation; see runGroup.
func (j *Job) Run(ctx context.Context) error {
	layout, err := j.checkTopics(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if j.cfg.Assignment.Mode == "group" {
		return j.runGroup(ctx, layout)
	}
	parts := j.cfg.Assignment.Partitions
	j.addStats(func(s *Stats) { s.Assigned, s.Assignment = len(parts), true })
	return j.runStages(ctx, parts, layout, sink.Group{ID: j.cfg.Job.ID})
}

// runStages runs a stage for each of parts until ctx ends or one fails; a
// failure cancels the others. It returns the failures joined.
func (j *Job) runStages(ctx context.Context, parts []int, lay layout, group sink.Group) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		cancel(err)
	}
	for _, p := range parts {
		wg.Go(func() {
			if err := newRunner(j, p, lay, group).run(ctx); err != nil {
				fail(err)
			}
		})
		for _, src := range j.routeSources(p, lay) {
			wg.Go(func() {
				rt, err := newRouter(j, src, lay)
				if err == nil {
					err = rt.run(ctx)
				}
				if err != nil {
					fail(err)
				}
			})
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// layout is what Run learnt about the topics at start-up.
type layout struct {
	partitions    int // of the stages' input topics, the output topic and the job
	dlqPartitions int
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
	return lay, nil
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
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{}}
	for _, t := range topics {
		req.Topics[t] = []int{p}
	}
	res, err := j.client.OffsetFetch(ctx, req)
	offsets := make([]int64, len(topics))
	for i := range offsets {
		offsets[i] = -1
	}
	if err != nil {
		return nil, err
	}
	if errors.Is(res.Error, kafka.GroupIdNotFound) {
		return offsets, nil // kfake's answer for a group that never committed
	}
	if res.Error != nil {
		return nil, fmt.Errorf("offset fetch group %q: %w", group, res.Error)
	}
	for i, t := range topics {
		for _, op := range res.Topics[t] {
			if op.Partition != p {
				continue
			}
			if op.Error != nil {
				return nil, fmt.Errorf("offset fetch group %q %s/%d: %w", group, t, p, op.Error)
			}
			offsets[i] = op.CommittedOffset
		}
	}
	return offsets, nil
}
