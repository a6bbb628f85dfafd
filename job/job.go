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

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/backoff"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
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

// ErrUnsupported reports a configuration this build of the job cannot run
// yet (see the package documentation, "Limits").
var ErrUnsupported = errors.New("job: not supported yet")

// Options are the resources a Job is given rather than configured with.
type Options struct {
	// Logger receives the job's events. The default value discards them.
	Logger *slog.Logger
	// Transport carries every request of the job (fetch, transactions,
	// offsets, metadata). The default value is a new *kafka.Transport with
	// the config's client id.
	Transport *kafka.Transport
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
	// Ready is the number of stages that completed recovery and are
	// processing input now.
	Ready int
}

// Job runs the stages of the partitions this instance owns.
type Job struct {
	cfg    *config.Config
	opts   Options
	log    *slog.Logger
	client *kafka.Client
	topics []string // the raw topics
	codec  compress.Compression
	partFn func(key []byte, n int) int // nil: no partition check

	mu    sync.Mutex
	stats Stats
	parts map[int]*partMetrics // see metrics.go
}

// New checks that cfg is something this build can run and returns a Job.
// It does no I/O.
func New(cfg *config.Config, opts Options) (*Job, error) {
	var problems []string
	if cfg.Input.Partitioning != "input" {
		problems = append(problems, fmt.Sprintf("input.partitioning: only \"input\", got %q", cfg.Input.Partitioning))
	}
	if cfg.Assignment.Mode != "static" {
		problems = append(problems, fmt.Sprintf("assignment.mode: only \"static\", got %q", cfg.Assignment.Mode))
	}
	if cfg.Assignment.Mode == "static" && len(cfg.Assignment.Partitions) == 0 {
		problems = append(problems, "assignment.partitions: no partitions to run")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w:\n%s", ErrUnsupported, strings.Join(problems, "\n"))
	}
	opts.applyDefaults(cfg)
	j := &Job{
		cfg:    cfg,
		opts:   opts,
		log:    opts.Logger,
		client: &kafka.Client{Addr: kafka.TCP(cfg.Kafka.Brokers...), Transport: opts.Transport},
		topics: slices.Clone(cfg.Input.Topics),
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
	}
	return j, nil
}

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
// fails for good: fenced by another instance, a fatal broker answer, or a
// failed state store. The first such failure stops every stage and is
// returned.
func (j *Job) Run(ctx context.Context) error {
	layout, err := j.checkTopics(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, p := range j.cfg.Assignment.Partitions {
		wg.Go(func() {
			r := newRunner(j, p, layout)
			if err := r.run(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				cancel(err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// layout is what Run learnt about the topics at start-up.
type layout struct {
	partitions    int // of the raw topic, the output topic and the job
	dlqPartitions int
}

// checkTopics verifies the promise of input mode: the output topic has
// exactly as many partitions as the raw topic (one per stage), every owned
// partition exists, and the DLQ topic exists.
func (j *Job) checkTopics(ctx context.Context) (layout, error) {
	names := append([]string{j.cfg.Output.Topic, j.cfg.Output.DLQTopic}, j.topics...)
	var counts map[string]int
	b := &backoff.Backoff{Base: j.opts.Backoff, Limit: j.opts.MaxBackoff}
	deadline := time.Now().Add(max(j.retryTimeout(), 10*time.Second))
	for {
		var err error
		counts, err = j.partitionCounts(ctx, names)
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
	for i, t := range j.topics {
		missing(fmt.Sprintf("input.topics[%d]", i), t)
		if in := counts[t]; in > 0 && out > 0 && in != out {
			problems = append(problems, fmt.Sprintf("input.topics[%d]: raw topic %q has %d partitions, output topic %q has %d: input mode needs one output partition per raw partition", i, t, in, j.cfg.Output.Topic, out))
		}
	}
	for i, p := range j.cfg.Assignment.Partitions {
		if out > 0 && p >= out {
			problems = append(problems, fmt.Sprintf("assignment.partitions[%d]: partition %d does not exist: output topic %q has %d partitions", i, p, j.cfg.Output.Topic, out))
		}
	}
	if len(problems) > 0 {
		return layout{}, fmt.Errorf("%w:\n%s", ErrTopics, strings.Join(problems, "\n"))
	}
	return layout{partitions: out, dlqPartitions: counts[j.cfg.Output.DLQTopic]}, nil
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

// committedOffsets returns the group's committed offset of partition p of
// every raw topic, in the order of j.topics; -1 where none is committed.
func (j *Job) committedOffsets(ctx context.Context, p int) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := &kafka.OffsetFetchRequest{GroupID: j.cfg.Job.ID, Topics: map[string][]int{}}
	for _, t := range j.topics {
		req.Topics[t] = []int{p}
	}
	res, err := j.client.OffsetFetch(ctx, req)
	offsets := make([]int64, len(j.topics))
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
		return nil, fmt.Errorf("offset fetch group %q: %w", j.cfg.Job.ID, res.Error)
	}
	for i, t := range j.topics {
		for _, op := range res.Topics[t] {
			if op.Partition != p {
				continue
			}
			if op.Error != nil {
				return nil, fmt.Errorf("offset fetch group %q %s/%d: %w", j.cfg.Job.ID, t, p, op.Error)
			}
			offsets[i] = op.CommittedOffset
		}
	}
	return offsets, nil
}
