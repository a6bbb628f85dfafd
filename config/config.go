// Package config loads dedupstream's YAML job files: strict (unknown keys
// are errors), with ${VAR} and ${VAR:default} interpolation, documented
// defaults, and one validation pass that reports every problem with its
// file, line and field path.
package config

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/dedupstream/dedupstream/statestore"
)

// Config is one dedupstream job.
type Config struct {
	Job        Job        `yaml:"job"`
	Kafka      Kafka      `yaml:"kafka"`
	Input      Input      `yaml:"input"`
	Output     Output     `yaml:"output"`
	Assignment Assignment `yaml:"assignment"`
	Dedup      Dedup      `yaml:"dedup"`
	State      State      `yaml:"state"`
	Commit     Commit     `yaml:"commit"`
	Fetch      Fetch      `yaml:"fetch"`
	Produce    Produce    `yaml:"produce"`
	Metrics    Metrics    `yaml:"metrics"`
	Log        Log        `yaml:"log"`
}

// Job names the job.
type Job struct {
	// ID names the job: transactional ids are "<id>-<partition>" and the
	// consumer group is "<id>". Required.
	ID string `yaml:"id"`
}

// Kafka says how to reach the brokers.
type Kafka struct {
	// Brokers are bootstrap host:port addresses. Required.
	Brokers []string `yaml:"brokers"`
	// ClientID is sent with every request. The default value is "dedupstream".
	ClientID string `yaml:"client_id"`
	// TransactionTimeout is the broker-side timeout of an open
	// transaction. The default value is 60s.
	TransactionTimeout time.Duration `yaml:"transaction_timeout"`
	// RequestTimeout bounds one request to a broker (a fetch on top of its
	// long-poll wait); a request without an answer by then is abandoned
	// and retried, and a produce or EndTxn of unknown outcome makes the
	// cycle abort and recover. The default value is 10s.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// UnreachableAfter is how long a partition may wait for any broker
	// answer, with a request outstanding or failing, before it is reported
	// unreachable (a warning, /readyz 503, the response age gauge). The
	// default value is 5s.
	UnreachableAfter time.Duration `yaml:"unreachable_after"`
	// OnFenced is what a static-mode stage does when its producer epoch
	// was bumped and the cause could not be decided (see
	// docs/outages.md): "recover" takes the transactional id back after
	// OnFencedBackoff and recovers from the output; "exit" stops the job.
	// A fence by another instance always stops, a timeout abort by the
	// coordinator always recovers. The default value is "recover".
	OnFenced string `yaml:"on_fenced"`
	// OnFencedBackoff is the wait before a stage takes its transactional
	// id back after a fence it recovers from. The default value is 5s.
	OnFencedBackoff time.Duration `yaml:"on_fenced_backoff"`
	// TLS encrypts every connection the job opens to the brokers. The
	// default value is off.
	TLS TLS `yaml:"tls"`
	// SASL authenticates every connection the job opens to the brokers.
	// The default value is off.
	SASL SASL `yaml:"sasl"`
}

// Input names the raw topics.
type Input struct {
	// Topics are the raw topics read. Required, at least one.
	Topics []string `yaml:"topics"`
	// Partitioning is "input" (raw topics are keyed by business key with
	// the output's partition count) or "repartition". The default value is
	// "input".
	Partitioning string `yaml:"partitioning"`
	// Partitioner is the partitioner producers of the raw topics use for
	// the business key ("murmur2", "fnv1a", "crc32"); records found on
	// another partition are counted. The default value is "murmur2".
	Partitioner string `yaml:"partitioner"`
	// OffsetReset is what a reader of the raw (or repartition) topics does
	// when its position is no longer in the log: retention or
	// DeleteRecords removed records it never read (the job was stopped, or
	// behind, for longer than the topic keeps records), or the topic was
	// deleted and created again. "earliest" goes on from the log start,
	// logs a warning and counts the offsets skipped
	// (dedupstream_input_offsets_skipped_total); "fail" stops the job so
	// that an operator decides. The default value is "earliest".
	OffsetReset string `yaml:"offset_reset"`
}

// Output names the deduplicated and dead-letter topics.
type Output struct {
	// Topic is the deduplicated topic; it must have one partition per
	// stage. Required.
	Topic string `yaml:"topic"`
	// DLQTopic receives records that cannot be processed, with the reason
	// in headers. The default value is "<topic>-dlq".
	DLQTopic string `yaml:"dlq_topic"`
	// Compression is "none", "gzip", "snappy", "lz4" or "zstd". The
	// default value is "none".
	Compression string `yaml:"compression"`
}

// Assignment says which partitions this instance owns.
type Assignment struct {
	// Mode is "static" (a partition list or file) or "group" (a Kafka
	// consumer group assigns partitions). The default value is "static".
	Mode string `yaml:"mode"`
	// Partitions lists the owned partitions in static mode.
	Partitions []int `yaml:"partitions"`
	// PartitionsFile is a YAML file with a "partitions" list, relative to
	// the config file; used in static mode when Partitions is empty.
	PartitionsFile string `yaml:"partitions_file"`
	// SessionTimeout is how long the group coordinator waits for a
	// heartbeat before it moves a member's partitions elsewhere (group
	// mode). The default value is 30s.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// HeartbeatInterval is the time between heartbeats; it must be below
	// a third of SessionTimeout. The default value is 3s.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// RebalanceTimeout is how long the coordinator waits for every member
	// to rejoin in a rebalance: long enough to finish an open commit
	// cycle. The default value is 60s.
	RebalanceTimeout time.Duration `yaml:"rebalance_timeout"`
}

// Dedup configures the stages; see pipeline.Config for the semantics.
type Dedup struct {
	// Key lists the business key fields: "key", "header:NAME" or
	// "json:a.b.c"; several fields form a composite key. The default value
	// is ["key"].
	Key []string `yaml:"key"`
	// Mode is "first" or "version". The default value is "first".
	Mode string `yaml:"mode"`
	// Version is the version field in version mode ("header:NAME" or
	// "json:path").
	Version string `yaml:"version"`
	// Window is how long a key is remembered. The default value is 24h.
	Window time.Duration `yaml:"window"`
	// Generations cuts the window into buckets. The default value is 4.
	Generations int `yaml:"generations"`
	// TimeBase is "record" or "processing". The default value is "record".
	TimeBase string `yaml:"time_base"`
	// MaxFutureSkew clamps record timestamps ahead of the wall clock. The
	// default value is 5m.
	MaxFutureSkew time.Duration `yaml:"max_future_skew"`
	// ExpectedKeys per partition per window sizes the Bloom front. The
	// default value is 1000000.
	ExpectedKeys uint `yaml:"expected_keys"`
	// FalsePositiveRate of the Bloom front. The default value is 0.01.
	FalsePositiveRate float64 `yaml:"false_positive_rate"`
	// MaxKeyBytes: longer business keys go to the DLQ. The default value
	// is 1024.
	MaxKeyBytes int `yaml:"max_key_bytes"`
	// MaxRecordBytes: larger records go to the DLQ. The default value is
	// 1MiB.
	MaxRecordBytes ByteSize `yaml:"max_record_bytes"`
}

// State places and sizes the state stores.
type State struct {
	// Dir holds one store per owned partition. Required.
	Dir string `yaml:"dir"`
	// Memory bounds the state memory of every store of this instance
	// together: one block cache shared by all owned partitions, in which
	// each store reserves its indexes of recent keys and Pebble its
	// memtables; those take at most half.
	// The Bloom fronts are not in it (see docs/scaling.md, "Memory"). The
	// default value is 512MiB (statestore.DefaultMemory).
	Memory ByteSize `yaml:"memory"`
	// MemTableSize fixes the size of each store's index of recent keys
	// (its memtable) instead of deriving it from Memory: 3 per store (two
	// indexes, sort buffers, Pebble's memtables) must then fit in half of
	// Memory.
	// The default value is 0: Memory / (6 x owned partitions), in 64KiB
	// steps, between 4MiB and 32MiB.
	MemTableSize ByteSize `yaml:"memtable_size"`
	// CacheSize was the block cache of each store; Memory replaces it and
	// a config that sets it is refused.
	CacheSize ByteSize `yaml:"cache_size"`
	// OnCorruption is what a stage does when its store's files fail their
	// checks (a block failing its checksum, a garbled sstable, MANIFEST or
	// checkpoint record): "restore" moves the directory aside to
	// "<dir>/partition-<p>.corrupt-<unix time>" (the newest 3 are kept),
	// opens a new store and restores it from the output topic as for a
	// lost directory, and goes on; after 3 corruptions of a partition
	// within an hour it stops instead (the disk is failing). "fail" stops
	// the job with the error, and every restart meets the same corruption
	// until the directory is removed. Faults of the disk itself (ENOSPC,
	// EIO, permission denied) stop the job either way. The default value
	// is "restore".
	OnCorruption string `yaml:"on_corruption"`
}

// Commit bounds the commit cycle.
type Commit struct {
	// Interval is the longest a cycle stays open. The default value is
	// 100ms.
	Interval time.Duration `yaml:"interval"`
	// MaxRecords ends a cycle early. The default value is 50000.
	MaxRecords int `yaml:"max_records"`
	// ShutdownTimeout bounds the graceful drain on SIGTERM/SIGINT: the
	// commit of each stage's open cycle. The default value is 30s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
}

// Metrics configures the metrics and health listener.
type Metrics struct {
	// Listen is the host:port of /metrics, /livez and /readyz; "off"
	// disables the listener. The default value is "127.0.0.1:9464"
	// (loopback only).
	Listen string `yaml:"listen"`
}

// Log configures logging.
type Log struct {
	// Level is "debug", "info", "warn" or "error". The default value is
	// "info".
	Level string `yaml:"level"`
	// Format is "auto" (text on a terminal, JSON otherwise), "json" or
	// "text". The default value is "auto".
	Format string `yaml:"format"`
}

// ApplyDefaults fills every unset field with its documented default.
func (c *Config) ApplyDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Kafka.ClientID, "dedupstream")
	if c.Kafka.TransactionTimeout == 0 {
		c.Kafka.TransactionTimeout = time.Minute
	}
	if c.Kafka.RequestTimeout == 0 {
		c.Kafka.RequestTimeout = 10 * time.Second
	}
	if c.Kafka.UnreachableAfter == 0 {
		c.Kafka.UnreachableAfter = 5 * time.Second
	}
	def(&c.Kafka.OnFenced, "recover")
	if c.Kafka.OnFencedBackoff == 0 {
		c.Kafka.OnFencedBackoff = 5 * time.Second
	}
	def(&c.Input.Partitioning, "input")
	def(&c.Input.Partitioner, "murmur2")
	def(&c.Input.OffsetReset, "earliest")
	if c.Output.Topic != "" {
		def(&c.Output.DLQTopic, c.Output.Topic+"-dlq")
	}
	def(&c.Output.Compression, "none")
	def(&c.Assignment.Mode, "static")
	if c.Assignment.SessionTimeout == 0 {
		c.Assignment.SessionTimeout = 30 * time.Second
	}
	if c.Assignment.HeartbeatInterval == 0 {
		c.Assignment.HeartbeatInterval = 3 * time.Second
	}
	if c.Assignment.RebalanceTimeout == 0 {
		c.Assignment.RebalanceTimeout = time.Minute
	}
	if len(c.Dedup.Key) == 0 {
		c.Dedup.Key = []string{"key"}
	}
	def(&c.Dedup.Mode, "first")
	def(&c.Dedup.TimeBase, "record")
	if c.Dedup.MaxRecordBytes == 0 {
		c.Dedup.MaxRecordBytes = 1 << 20
	}
	if c.State.Memory == 0 {
		c.State.Memory = ByteSize(statestore.DefaultMemory)
	}
	def(&c.State.OnCorruption, "restore")
	if c.Commit.Interval == 0 {
		c.Commit.Interval = 100 * time.Millisecond
	}
	if c.Commit.MaxRecords == 0 {
		c.Commit.MaxRecords = 50_000
	}
	if c.Commit.ShutdownTimeout == 0 {
		c.Commit.ShutdownTimeout = 30 * time.Second
	}
	c.Fetch.applyDefaults()
	c.Produce.applyDefaults()
	def(&c.Metrics.Listen, "127.0.0.1:9464")
	def(&c.Log.Level, "info")
	def(&c.Log.Format, "auto")
}

// Pipeline turns the dedup section into the stage configuration, with
// defaults applied. On a config Load returned it cannot fail; on one
// changed since, the error names the first field that does not parse.
// Validation parses through the same function, so the two cannot drift.
func (c *Config) Pipeline() (pipeline.Config, error) {
	var first error
	pc := c.parsePipeline(func(field string, err error) {
		if first == nil {
			first = fmt.Errorf("config: %s: %w", field, err)
		}
	})
	return pc, first
}

// parsePipeline builds the stage configuration, calling bad for every
// dedup field that does not parse; such a field keeps its zero value.
func (c *Config) parsePipeline(bad func(field string, err error)) pipeline.Config {
	pc := pipeline.Config{
		Window:            c.Dedup.Window,
		Generations:       c.Dedup.Generations,
		MaxFutureSkew:     c.Dedup.MaxFutureSkew,
		MaxKeyBytes:       c.Dedup.MaxKeyBytes,
		MaxRecordBytes:    int(c.Dedup.MaxRecordBytes),
		ExpectedKeys:      c.Dedup.ExpectedKeys,
		FalsePositiveRate: c.Dedup.FalsePositiveRate,
	}
	var err error
	if pc.Mode, err = pipeline.ParseMode(c.Dedup.Mode); err != nil {
		bad("dedup.mode", fmt.Errorf("must be one of first, version, got %q", c.Dedup.Mode))
	}
	if pc.TimeBase, err = pipeline.ParseTimeBase(c.Dedup.TimeBase); err != nil {
		bad("dedup.time_base", fmt.Errorf("must be one of record, processing, got %q", c.Dedup.TimeBase))
	}
	for i, k := range c.Dedup.Key {
		f, err := partition.ParseField(k)
		if err != nil {
			bad(fmt.Sprintf("dedup.key[%d]", i), err)
		}
		pc.Key = append(pc.Key, f)
	}
	if c.Dedup.Version != "" {
		if pc.Version, err = partition.ParseField(c.Dedup.Version); err != nil {
			bad("dedup.version", err)
		}
	}
	pc.ApplyDefaults()
	return pc
}

// Load reads, interpolates, decodes, defaults and validates one config
// file. Every problem is reported at once in an *Error.
func Load(path string) (*Config, error) {
	return load(path, os.LookupEnv)
}

func load(path string, lookup func(string) (string, bool)) (*Config, error) {
	var c Config
	lines, problems := decodeFile(path, &c, lookup)
	if lines == nil {
		return nil, &Error{Problems: problems}
	}
	v := validator{file: path, lines: lines, problems: problems}
	c.explicitZeros(&v)
	c.splitBrokers()
	c.ApplyDefaults()
	c.Kafka.resolveSecurityFiles(path)
	c.validate(&v)
	c.validateLimits(&v)
	if c.Assignment.Mode == "static" && len(c.Assignment.Partitions) == 0 && c.Assignment.PartitionsFile != "" {
		c.Assignment.Partitions = v.partitionsFile(resolve(path, c.Assignment.PartitionsFile), lookup)
	}
	c.State.validateMemory(&v, &c.Assignment)
	if len(v.problems) > 0 {
		slices.SortStableFunc(v.problems, func(a, b Problem) int {
			return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
		})
		return nil, &Error{Problems: v.problems}
	}
	return &c, nil
}

func resolve(configPath, rel string) string {
	if filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(filepath.Dir(configPath), rel)
}

type validator struct {
	file     string
	lines    map[string]int
	problems []Problem
}

func (v *validator) addf(field, format string, args ...any) {
	line := v.lines[field]
	for p := field; line == 0 && p != ""; {
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
		line = v.lines[p]
	}
	v.problems = append(v.problems, Problem{File: v.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) oneOf(field, got string, allowed ...string) {
	if !slices.Contains(allowed, got) {
		v.addf(field, "must be one of %s, got %q", strings.Join(allowed, ", "), got)
	}
}

func (c *Config) validate(v *validator) {
	if c.Job.ID == "" {
		v.addf("job.id", "required")
	}
	if len(c.Kafka.Brokers) == 0 {
		v.addf("kafka.brokers", "required: at least one host:port")
	}
	c.Kafka.validateSecurity(v)
	c.Kafka.validateOutage(v)
	if len(c.Input.Topics) == 0 {
		v.addf("input.topics", "required: at least one raw topic")
	}
	v.oneOf("input.partitioning", c.Input.Partitioning, "input", "repartition")
	if _, err := partition.PartitionerByName(c.Input.Partitioner); err != nil {
		v.addf("input.partitioner", "must be one of murmur2, fnv1a, crc32, got %q", c.Input.Partitioner)
	}
	v.oneOf("input.offset_reset", c.Input.OffsetReset, "earliest", "fail")
	if c.Output.Topic == "" {
		v.addf("output.topic", "required")
	}
	if slices.Contains(c.Input.Topics, c.Output.Topic) || (c.Output.DLQTopic != "" && c.Output.DLQTopic == c.Output.Topic) {
		v.addf("output.topic", "must differ from the input and DLQ topics")
	}
	v.oneOf("output.compression", c.Output.Compression, "none", "gzip", "snappy", "lz4", "zstd")
	v.oneOf("assignment.mode", c.Assignment.Mode, "static", "group")
	if c.Assignment.Mode == "static" && len(c.Assignment.Partitions) == 0 && c.Assignment.PartitionsFile == "" {
		v.addf("assignment.partitions", "static mode needs partitions or partitions_file")
	}
	if c.Assignment.Mode == "group" && len(c.Assignment.Partitions) > 0 {
		v.addf("assignment.partitions", "group mode: the consumer group assigns partitions; remove the list or use mode static")
	}
	if c.Assignment.Mode == "group" {
		a := c.Assignment
		if a.SessionTimeout <= 0 || a.HeartbeatInterval <= 0 || a.RebalanceTimeout <= 0 {
			v.addf("assignment", "session_timeout, heartbeat_interval and rebalance_timeout must be > 0")
		} else if a.HeartbeatInterval*3 > a.SessionTimeout {
			v.addf("assignment.heartbeat_interval", "must be at most a third of session_timeout (%v), got %v", a.SessionTimeout, a.HeartbeatInterval)
		}
	}
	for i, p := range c.Assignment.Partitions {
		if p < 0 {
			v.addf(fmt.Sprintf("assignment.partitions[%d]", i), "must be >= 0, got %d", p)
		}
	}
	// The stage's own validation names its fields "dedup.<name>" already.
	pc := c.parsePipeline(func(field string, err error) { v.addf(field, "%v", err) })
	if err := pc.Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			field, msg, _ := strings.Cut(line, ": ")
			v.addf(field, "%s", msg)
		}
	}
	if c.State.Dir == "" {
		v.addf("state.dir", "required")
	}
	v.oneOf("state.on_corruption", c.State.OnCorruption, "restore", "fail")
	if c.Commit.Interval <= 0 {
		v.addf("commit.interval", "must be > 0, got %v", c.Commit.Interval)
	}
	if c.Commit.MaxRecords < 1 {
		v.addf("commit.max_records", "must be >= 1, got %d", c.Commit.MaxRecords)
	}
	if c.Commit.ShutdownTimeout < 0 {
		v.addf("commit.shutdown_timeout", "must be > 0, got %v", c.Commit.ShutdownTimeout)
	}
	c.Fetch.validate(v)
	c.Produce.validate(v)
	v.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	v.oneOf("log.format", c.Log.Format, "auto", "json", "text")
}

// partitionsFile reads a static assignment file: a mapping with one key,
// "partitions", holding a list of partition numbers.
func (v *validator) partitionsFile(path string, lookup func(string) (string, bool)) []int {
	var pf struct {
		Partitions []int `yaml:"partitions"`
	}
	_, problems := decodeFile(path, &pf, lookup)
	v.problems = append(v.problems, problems...)
	if len(problems) == 0 && len(pf.Partitions) == 0 {
		v.problems = append(v.problems, Problem{File: path, Field: "partitions", Msg: "required: at least one partition"})
	}
	seen := map[int]bool{}
	for i, p := range pf.Partitions {
		if p < 0 {
			v.problems = append(v.problems, Problem{File: path, Field: fmt.Sprintf("partitions[%d]", i), Msg: fmt.Sprintf("must be >= 0, got %d", p)})
		}
		if seen[p] {
			v.problems = append(v.problems, Problem{File: path, Field: fmt.Sprintf("partitions[%d]", i), Msg: fmt.Sprintf("partition %d is listed twice: two stages cannot own one partition", p)})
		}
		seen[p] = true
	}
	return pf.Partitions
}

// validateOutage checks the fields that say how broker outages and fences
// are handled.
func (k *Kafka) validateOutage(v *validator) {
	if k.RequestTimeout < 100*time.Millisecond {
		v.addf("kafka.request_timeout", "must be >= 100ms, got %v", k.RequestTimeout)
	}
	if k.UnreachableAfter < 100*time.Millisecond {
		v.addf("kafka.unreachable_after", "must be >= 100ms, got %v", k.UnreachableAfter)
	}
	v.oneOf("kafka.on_fenced", k.OnFenced, "recover", "exit")
	if k.OnFencedBackoff < 0 {
		v.addf("kafka.on_fenced_backoff", "must be >= 0, got %v", k.OnFencedBackoff)
	}
}
