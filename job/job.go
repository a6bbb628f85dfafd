package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/kafkaauth"
	"github.com/dedupstream/dedupstream/internal/testhook"
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

// ErrAuth reports that a connection to the brokers could not be secured:
// the brokers refused the SASL credentials or mechanism, or the TLS
// handshake failed (an unknown certificate authority, a wrong server name,
// a rejected client certificate). Retrying cannot fix any of these, so Run
// returns it at start-up instead of retrying. A TLS/plaintext mismatch
// shows only as lost connections: it is retried like a broker that is down.
var ErrAuth = errors.New("job: cannot connect securely to the brokers (check kafka.tls and kafka.sasl)")

// Options are the resources a Job is given rather than configured with.
type Options struct {
	// Logger receives the job's events. The default value discards them.
	Logger *slog.Logger
	// Transport carries every request of the job (fetch, transactions,
	// offsets, metadata, admin). The default value is a new
	// *kafka.Transport with the config's client id, kafka.tls and
	// kafka.sasl. A given Transport is used as it is: it must carry its
	// own TLS and SASL settings.
	Transport *kafka.Transport
	// Dialer opens the consumer group's coordinator connections in
	// assignment mode group (kafka-go's ConsumerGroup does not use the
	// Transport). The default value is a *kafka.Dialer with the config's
	// client id, kafka.tls and kafka.sasl; a given one is used as it is.
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
	// fetchers; the default value is the config's kafka.request_timeout.
	// RetryTimeout bounds the retries of one call; zero selects the
	// defaults of packages sink and fetch.
	RequestTimeout time.Duration
	RetryTimeout   time.Duration

	// hooks are the tests' seam (internal/testhook); zero in production.
	hooks testhook.Hooks
}

func init() {
	testhook.Register(func(opts any, h testhook.Hooks) { opts.(*Options).hooks = h })
}

// defaultStateEvery is how often a stage refreshes the state metrics (Bloom
// fill, store bytes per generation, disk usage): the Bloom statistics cost a
// pass over the filter's memory, about 1 ms per 10 MB.
const defaultStateEvery = 10 * time.Second

// stateEvery is the state metrics' refresh interval.
func (o *Options) stateEvery() time.Duration {
	if o.hooks.StateEvery > 0 {
		return o.hooks.StateEvery
	}
	return defaultStateEvery
}

// failpoint calls the test hook of failpoint name, if any.
func (o *Options) failpoint(name string) {
	if o.hooks.Failpoint != nil {
		o.hooks.Failpoint(name)
	}
}

// applyDefaults fills the unset options. Its only error is a TLS or SASL
// file that became unreadable since the config was validated.
func (o *Options) applyDefaults(cfg *config.Config) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Transport == nil || o.Dialer == nil {
		// One Auth for both, so the group's connections are secured
		// exactly like the Transport's.
		auth, err := kafkaauth.New(cfg.Kafka)
		if err != nil {
			return fmt.Errorf("job: %w", err)
		}
		if o.Transport == nil {
			o.Transport = &kafka.Transport{ClientID: cfg.Kafka.ClientID, DialTimeout: 10 * time.Second, TLS: auth.TLS, SASL: auth.SASL}
		}
		if o.Dialer == nil {
			o.Dialer = &kafka.Dialer{ClientID: cfg.Kafka.ClientID, Timeout: 10 * time.Second, TLS: auth.TLS, SASLMechanism: auth.SASL}
		}
	}
	if o.Clock == nil {
		o.Clock = time.Now
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
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = cfg.Kafka.RequestTimeout
	}
	return nil
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
	// StatesDropped counts stores removed at open because they were
	// written under other dedup settings (see dedupchange.go).
	StatesDropped uint64
	// Misrouted counts records found on another partition than the
	// configured input partitioner gives for their key.
	Misrouted uint64
	// Cycles counts committed transactions.
	Cycles uint64
	// RouteIn counts raw records the route step of repartition mode read
	// in committed cycles; Routed those it wrote to the repartition topic
	// (the rest went to the DLQ and are counted in DeadLettered too).
	RouteIn, Routed uint64
	// DLQTruncated counts DLQ records (also in DeadLettered) cut down to
	// fit the DLQ topic's max.message.bytes.
	DLQTruncated uint64
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
	dialer *sink.Dialer // the producers' own produce connections, secured like client's
	raw    []string     // the raw topics
	topics []string     // the stages' input: the raw topics, or the repartition topic
	codec  compress.Compression
	partFn func(key []byte, n int) int // nil: no partition check
	pc     pipeline.Config             // cfg's dedup section, parsed once in New
	dedup  string                      // dedupSettings(pc), recorded in every checkpoint

	mu    sync.Mutex
	stats Stats
	parts map[int]*partMetrics // see metrics.go
	mem   *memory              // see memory.go; set while Run runs
	links *links               // see links.go
	guard *topicGuard          // see topicguard.go; set while Run runs
	// skipped counts input offsets skipped by input.offset_reset
	// (inputreset.go).
	skipped map[topicPart]uint64
	// moved are the output partitions' ends at the last migration, from
	// the partitions topic (restoremoved.go); set by Run before any stage
	// starts.
	moved map[int]int64
}

// New checks that cfg is something this build can run and returns a Job.
// It does no I/O.
func New(cfg *config.Config, opts Options) (*Job, error) {
	if cfg.Assignment.Mode == "static" && len(cfg.Assignment.Partitions) == 0 {
		return nil, errors.New("job: assignment.partitions: no partitions to run")
	}
	if err := checkBrokers(cfg.Kafka.Brokers); err != nil {
		return nil, err
	}
	if err := opts.applyDefaults(cfg); err != nil {
		return nil, err
	}
	if cfg.Kafka.SASL.Mechanism == config.SASLPlain && !cfg.Kafka.TLS.Enabled {
		opts.Logger.Warn("kafka.sasl: PLAIN without kafka.tls sends the password unencrypted")
	}
	j := &Job{
		cfg:    cfg,
		opts:   opts,
		log:    opts.Logger,
		client: &kafka.Client{Addr: kafka.TCP(cfg.Kafka.Brokers...), Transport: opts.Transport},
		dialer: sink.DialerFor(opts.Transport),
		raw:    slices.Clone(cfg.Input.Topics),
		topics: slices.Clone(cfg.Input.Topics),
		links:  newLinks(cfg.Kafka.UnreachableAfter, opts.Logger),
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
	var err error
	if j.pc, err = cfg.Pipeline(); err != nil {
		return nil, fmt.Errorf("job: %w (validate the config with config.Load)", err)
	}
	j.dedup = dedupSettings(j.pc)
	if slices.Equal(cfg.Dedup.Key, []string{"key"}) {
		switch {
		case cfg.Input.Partitioning == "repartition":
			j.partFn = partition.Murmur2Partition // how the route step places records
		default:
			if j.partFn, err = partition.PartitionerByName(cfg.Input.Partitioner); err != nil {
				return nil, fmt.Errorf("job: input.partitioner: %w (validate the config with config.Load)", err)
			}
		}
	}
	return j, nil
}

// RepartitionTopic is the topic between the route step and the stages in
// repartition mode: "<job.id>-repartition".
func RepartitionTopic(cfg *config.Config) string { return cfg.Job.ID + "-repartition" }

// Ready reports whether an assignment is current and every stage of it has
// completed recovery and is processing input: the /readyz condition.
func (j *Job) Ready() bool {
	s := j.Stats()
	return s.Assignment && s.Ready == s.Assigned
}

// Stats returns the counters so far. It may be called while Run runs.
//
// The counters of the stages' committed cycles (Counts, Misrouted, Cycles)
// have one source, the partitions' metrics, and are summed here; j.stats
// holds the rest (route steps, recoveries, assignment).
func (j *Job) Stats() Stats {
	j.mu.Lock()
	s := j.stats
	parts := make([]*partMetrics, 0, len(j.parts))
	for _, pm := range j.parts {
		parts = append(parts, pm)
	}
	j.mu.Unlock()
	for _, pm := range parts {
		pm.mu.Lock()
		s.Counts.Add(pm.counts)
		s.Misrouted += pm.misrouted
		s.Cycles += pm.cycles
		pm.mu.Unlock()
	}
	return s
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
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go j.links.watch(wctx)
	layout, err := j.checkTopics(ctx)
	if err == nil {
		err = j.checkPartitionCount(ctx, layout.partitions)
	}
	if err == nil {
		err = j.checkLayoutRecords(ctx, layout)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	j.checkOutputRetention(ctx)
	j.fitOutput(layout)
	if err := j.openMemory(); err != nil {
		return err
	}
	defer j.closeMemory()
	ctx, stop := j.guardTopics(ctx, layout)
	defer stop(nil)
	if j.cfg.Assignment.Mode == "group" {
		return guardStopped(ctx, j.runGroup(ctx, layout))
	}
	parts := j.cfg.Assignment.Partitions
	j.addStats(func(s *Stats) { s.Assigned, s.Assignment = len(parts), true })
	return guardStopped(ctx, j.runStages(ctx, parts, layout, sink.Group{ID: j.cfg.Job.ID}))
}

// runStages runs a stage for each of parts until ctx ends or one fails; a
// failure cancels the others. It returns the failures joined.
func (j *Job) runStages(ctx context.Context, parts []int, lay layout, group sink.Group) error {
	j.planMemory(len(parts))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		if !j.guard.reported(err, errs) { // every stage meets a changed count: say it once
			errs = append(errs, err)
		}
		mu.Unlock()
		cancel(err)
	}
	gate := newStartGate(len(parts))
	for _, p := range parts {
		wg.Go(func() {
			r := newRunner(j, p, lay, group)
			r.gate = gate
			if err := r.run(ctx); err != nil {
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
