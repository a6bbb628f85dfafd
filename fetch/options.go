package fetch

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// OutOfRangePolicy says what Fetch does when the broker answers
// OFFSET_OUT_OF_RANGE, that is when the position lies before the log start
// (retention or DeleteRecords removed it) or after the log end.
type OutOfRangePolicy uint8

const (
	// OutOfRangeFail returns an *OutOfRangeError carrying the valid range
	// and leaves the position where it was. Nothing is skipped silently:
	// the caller decides. This is the default.
	OutOfRangeFail OutOfRangePolicy = iota
	// OutOfRangeEarliest moves the position to the log start offset and
	// fetches from there. Records between the old position and the new one
	// are gone; a warning is logged.
	OutOfRangeEarliest
	// OutOfRangeLatest moves the position to the last stable offset and
	// fetches from there, skipping everything before it; a warning is
	// logged.
	OutOfRangeLatest
)

func (p OutOfRangePolicy) String() string {
	switch p {
	case OutOfRangeFail:
		return "fail"
	case OutOfRangeEarliest:
		return "earliest"
	case OutOfRangeLatest:
		return "latest"
	}
	return fmt.Sprintf("OutOfRangePolicy(%d)", uint8(p))
}

// Defaults of Options.
const (
	DefaultMinBytes       = 1
	DefaultMaxBytes       = 1 << 20
	DefaultMaxWait        = 500 * time.Millisecond
	DefaultRequestTimeout = 30 * time.Second
	DefaultBackoff        = 100 * time.Millisecond
	DefaultMaxBackoff     = 32 * time.Second
	DefaultRetryTimeout   = 2 * time.Minute
	DefaultClientID       = "dedupstream"
)

// Options tune a Fetcher. The zero value of every field selects its default.
type Options struct {
	// MinBytes is the amount of record data the broker waits for before it
	// answers a fetch (up to MaxWait). The default value is 1: answer as
	// soon as anything is readable.
	MinBytes int
	// MaxBytes bounds the record data of one fetch response, and so the size
	// of a Batch's buffer. A single record batch larger than MaxBytes is
	// still returned whole (Kafka's KIP-74 rule), so progress never stalls.
	// The default value is 1 MiB (Kafka's max.partition.fetch.bytes).
	MaxBytes int
	// MaxRequestBytes bounds the whole fetch response (Kafka's
	// fetch.max.bytes); it must be at least MaxBytes, since a response cut
	// by the request limit may leave out the partition's aborted
	// transactions. The default value is the larger of 50 MiB and twice
	// MaxBytes.
	MaxRequestBytes int
	// MaxWait is how long the broker holds a fetch that has less than
	// MinBytes to return. A Fetch at the end of the partition returns an
	// empty Batch after about MaxWait. The default value is 500ms.
	MaxWait time.Duration
	// RequestTimeout bounds one round trip on top of MaxWait; a broker that
	// does not answer within MaxWait+RequestTimeout is treated as a
	// connection error (retried). The default value is 30s.
	RequestTimeout time.Duration
	// OutOfRange is the policy for OFFSET_OUT_OF_RANGE. The default value
	// is OutOfRangeFail.
	OutOfRange OutOfRangePolicy
	// OnReset, when set, is called after the OutOfRange policy moved the
	// position from one offset to another, on the goroutine that called
	// Fetch, after the warning is logged.
	OnReset func(from, to int64)
	// Backoff is the first wait after a retriable error (leader change,
	// connection error, unavailable partition). Each further retry doubles
	// it, with jitter, up to MaxBackoff. The default value is 100ms.
	Backoff time.Duration
	// MaxBackoff caps the wait between retries. The default value is 32s.
	MaxBackoff time.Duration
	// RetryTimeout is how long one call keeps retrying retriable errors
	// before it returns the last one; a negative value retries until the
	// context ends. The default value is 2m.
	RetryTimeout time.Duration
	// ClientID is sent in the request headers. The default value is the
	// transport's ClientID when the client uses a *kafka.Transport that
	// sets one, else "dedupstream".
	ClientID string
	// Logger receives retries and out-of-range resets. The default value
	// discards them.
	Logger *slog.Logger
}

// ApplyDefaults replaces zero fields with their defaults.
func (o *Options) ApplyDefaults() {
	if o.MinBytes == 0 {
		o.MinBytes = DefaultMinBytes
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = responseMaxBytes(o.MaxBytes)
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Backoff == 0 {
		o.Backoff = DefaultBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.RetryTimeout == 0 {
		o.RetryTimeout = DefaultRetryTimeout
	}
	if o.ClientID == "" {
		o.ClientID = DefaultClientID
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every invalid field, one per line, each naming the field.
func (o *Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	if o.MinBytes < 0 {
		bad("fetch.min_bytes: must be >= 0, got %d", o.MinBytes)
	}
	if o.MaxBytes < 0 || o.MaxBytes > maxInt32 {
		bad("fetch.max_bytes: must be in [0, %d], got %d", maxInt32, o.MaxBytes)
	}
	if o.MaxRequestBytes < 0 || o.MaxRequestBytes > maxInt32 {
		bad("fetch.max_request_bytes: must be in [0, %d], got %d", maxInt32, o.MaxRequestBytes)
	} else if part := cmp.Or(o.MaxBytes, DefaultMaxBytes); o.MaxRequestBytes > 0 && o.MaxRequestBytes < part {
		bad("fetch.max_request_bytes: must be >= max_bytes (%d), got %d", part, o.MaxRequestBytes)
	}
	if o.MinBytes > 0 && o.MaxBytes > 0 && o.MinBytes > o.MaxBytes {
		bad("fetch.min_bytes: must be <= max_bytes (%d), got %d", o.MaxBytes, o.MinBytes)
	}
	if o.MaxWait < 0 || o.MaxWait > time.Duration(maxInt32)*time.Millisecond {
		bad("fetch.max_wait: must be in [0, %v], got %v", time.Duration(maxInt32)*time.Millisecond, o.MaxWait)
	}
	if o.RequestTimeout < 0 {
		bad("fetch.request_timeout: must be >= 0, got %v", o.RequestTimeout)
	}
	if o.Backoff < 0 {
		bad("fetch.backoff: must be >= 0, got %v", o.Backoff)
	}
	if o.MaxBackoff < 0 {
		bad("fetch.max_backoff: must be >= 0, got %v", o.MaxBackoff)
	}
	if o.Backoff > 0 && o.MaxBackoff > 0 && o.Backoff > o.MaxBackoff {
		bad("fetch.backoff: must be <= max_backoff (%v), got %v", o.MaxBackoff, o.Backoff)
	}
	if o.OutOfRange > OutOfRangeLatest {
		bad("fetch.out_of_range: must be fail, earliest or latest, got %v", o.OutOfRange)
	}
	return errors.Join(errs...)
}

const maxInt32 = 1<<31 - 1
