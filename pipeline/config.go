package pipeline

import (
	"errors"
	"fmt"
	"time"

	"github.com/dedupstream/dedupstream/partition"
)

// Mode says which repeats are dropped.
type Mode uint8

const (
	// ModeFirst keeps the first record of a key in the window and drops
	// every later one.
	ModeFirst Mode = iota
	// ModeVersion keeps a record only if its version is greater than the
	// version last emitted for its key in the window.
	ModeVersion
)

// ParseMode reads the config spelling of a Mode: "first" or "version".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "first":
		return ModeFirst, nil
	case "version":
		return ModeVersion, nil
	}
	return 0, fmt.Errorf("unknown mode %q (want first or version)", s)
}

func (m Mode) String() string {
	if m == ModeVersion {
		return "version"
	}
	return "first"
}

// TimeBase says which clock measures the window.
type TimeBase uint8

const (
	// RecordTime measures the window on record timestamps: the stage clock
	// is the largest timestamp seen so far.
	RecordTime TimeBase = iota
	// ProcessingTime measures the window on the wall clock.
	ProcessingTime
)

// ParseTimeBase reads the config spelling of a TimeBase: "record" or
// "processing".
func ParseTimeBase(s string) (TimeBase, error) {
	switch s {
	case "record":
		return RecordTime, nil
	case "processing":
		return ProcessingTime, nil
	}
	return 0, fmt.Errorf("unknown time base %q (want record or processing)", s)
}

func (t TimeBase) String() string {
	if t == ProcessingTime {
		return "processing"
	}
	return "record"
}

// Config is one stage's dedup configuration. The zero value of every field
// means its default; call ApplyDefaults, then Validate.
type Config struct {
	// Window is how long a key is remembered after it was emitted. A key
	// is remembered for at least Window and at most
	// Window + Window/Generations. The default value is 24h.
	Window time.Duration
	// Generations is the number of time buckets the window is cut into.
	// More generations expire more smoothly but cost a Bloom sub-filter
	// and a store bucket each. The default value is 4.
	Generations int
	// Mode is ModeFirst or ModeVersion. The default value is ModeFirst.
	Mode Mode
	// TimeBase is RecordTime or ProcessingTime. The default value is
	// RecordTime.
	TimeBase TimeBase
	// MaxFutureSkew bounds how far ahead of the wall clock a record
	// timestamp may move the clock in RecordTime. The default value is 5m.
	MaxFutureSkew time.Duration
	// Key lists the fields that make up the business key; several fields
	// form a composite key. The default value is the Kafka record key.
	Key []partition.Field
	// Version is the field holding the version in ModeVersion.
	Version partition.Field
	// MaxKeyBytes is the longest business key accepted; longer keys go to
	// the DLQ. The default value is 1024.
	MaxKeyBytes int
	// MaxRecordBytes is the largest record (key + value + headers)
	// accepted; larger records go to the DLQ. The default value is 1 MiB,
	// Kafka's default max.message.bytes.
	MaxRecordBytes int
	// ExpectedKeys is the number of distinct keys expected per window; it
	// sizes the Bloom front. The default value is 1,000,000.
	ExpectedKeys uint
	// FalsePositiveRate is the Bloom front's target false-positive rate at
	// ExpectedKeys; a false positive costs one store read. The default
	// value is 0.01.
	FalsePositiveRate float64
}

// ApplyDefaults fills every zero field with its default.
func (c *Config) ApplyDefaults() {
	if c.Window == 0 {
		c.Window = 24 * time.Hour
	}
	if c.Generations == 0 {
		c.Generations = 4
	}
	if c.MaxFutureSkew == 0 {
		c.MaxFutureSkew = 5 * time.Minute
	}
	if len(c.Key) == 0 {
		c.Key = []partition.Field{{Source: partition.SourceKey}}
	}
	if c.MaxKeyBytes == 0 {
		c.MaxKeyBytes = 1024
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = 1 << 20
	}
	if c.ExpectedKeys == 0 {
		c.ExpectedKeys = 1_000_000
	}
	if c.FalsePositiveRate == 0 {
		c.FalsePositiveRate = 0.01
	}
}

// Validate reports every problem, one per line, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("dedup.%s: "+format, append([]any{field}, args...)...))
	}
	if c.Window <= 0 {
		bad("window", "must be > 0, got %v", c.Window)
	}
	if c.Generations < 1 || c.Generations > 64 {
		bad("generations", "must be in [1, 64], got %d", c.Generations)
	}
	if c.Window > 0 && c.Generations > 0 && c.Window/time.Duration(c.Generations) < time.Millisecond {
		bad("window", "window/generations must be >= 1ms, got %v/%d", c.Window, c.Generations)
	}
	if c.MaxFutureSkew < 0 {
		bad("max_future_skew", "must be >= 0, got %v", c.MaxFutureSkew)
	}
	if c.MaxKeyBytes < 1 {
		bad("max_key_bytes", "must be >= 1, got %d", c.MaxKeyBytes)
	}
	if c.MaxRecordBytes < 1 {
		bad("max_record_bytes", "must be >= 1, got %d", c.MaxRecordBytes)
	}
	if c.FalsePositiveRate <= 0 || c.FalsePositiveRate >= 1 {
		bad("false_positive_rate", "must be in (0, 1), got %v", c.FalsePositiveRate)
	}
	if c.Mode == ModeVersion && c.Version.Source == partition.SourceKey {
		bad("version", "mode version needs a header or JSON version field")
	}
	return errors.Join(errs...)
}

// window maps clock readings to generations.
type window struct {
	spanMs int64  // length of one generation
	live   uint64 // generations kept live: Generations + 1
}

func newWindow(c *Config) window {
	return window{
		spanMs: (c.Window / time.Duration(c.Generations)).Milliseconds(),
		live:   uint64(c.Generations) + 1,
	}
}

// gen is the generation of a clock reading in Unix milliseconds.
func (w window) gen(ms int64) uint64 {
	if ms < 0 {
		return 0
	}
	return uint64(ms / w.spanMs)
}

// OldestLive is the oldest generation still live when cur is the newest.
func (c *Config) OldestLive(cur uint64) uint64 { return newWindow(c).oldestLive(cur) }

// SpanMs is the length of one generation in milliseconds.
func (c *Config) SpanMs() int64 { return newWindow(c).spanMs }

// oldestLive is the oldest generation still live when cur is the newest.
func (w window) oldestLive(cur uint64) uint64 {
	if cur < w.live-1 {
		return 0
	}
	return cur - (w.live - 1)
}
