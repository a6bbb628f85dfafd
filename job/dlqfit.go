package job

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/dedupstream/dedupstream/sink"
)

// Headers of a DLQ record cut down to fit the DLQ topic (see fitDLQ).
const (
	// HeaderTruncated lists what the DLQ copy lacks, comma-separated, out
	// of key, value and headers (the record's own headers).
	HeaderTruncated = "dedupstream.truncated"
	// HeaderValueSize is the original value's length in bytes; the DLQ
	// copy's value is its first bytes, or empty when it was left out.
	HeaderValueSize = "dedupstream.value.size"
	// HeaderKeySize is the original key's length in bytes.
	HeaderKeySize = "dedupstream.key.size"
	// HeaderSourceTimestamp is the source record's timestamp in Unix
	// milliseconds (the DLQ copy keeps it as its own timestamp too).
	HeaderSourceTimestamp = "dedupstream.source.timestamp"
)

// defaultMaxMessageBytes is Kafka's default max.message.bytes, assumed
// when the DLQ topic's cannot be read.
const defaultMaxMessageBytes = 1048588

// dlqSlack is kept free below max.message.bytes: compression may make an
// incompressible value slightly larger (lz4 adds up to 1 byte in 255).
func dlqSlack(limit int) int { return 64 + limit/128 }

// fitDLQ returns rec, a DLQ record whose last dlqHeaders headers are the
// job's (reason, source topic, partition, offset), unchanged when a batch
// holding only it fits limit bytes. Otherwise it returns a copy that fits
// and true: the job's headers, the source timestamp, the key (cut only when
// it alone cannot fit), as much of the value as fits, and headers naming
// what was cut and the original sizes; the record's own headers are left
// out. A record that cannot reach the DLQ would block its partition for
// good: every restart would fail on it again.
func fitDLQ(rec sink.Record, limit int) (sink.Record, bool) {
	if limit <= 0 || sink.SingleBatchSize(&rec) <= limit-dlqSlack(limit) {
		return rec, false
	}
	own := rec.Headers[max(len(rec.Headers)-dlqHeaders, 0):]
	var cut []string
	hs := make([]sink.Header, 0, len(own)+4)
	hs = append(hs, own...)
	hs = append(hs,
		sink.Header{Key: HeaderSourceTimestamp, Value: strconv.AppendInt(nil, rec.Time.UnixMilli(), 10)},
		sink.Header{Key: HeaderKeySize, Value: strconv.AppendInt(nil, int64(len(rec.Key)), 10)},
		sink.Header{Key: HeaderValueSize, Value: strconv.AppendInt(nil, int64(len(rec.Value)), 10)},
		sink.Header{Key: HeaderTruncated, Value: []byte("key,value,headers")}, // the longest, while sizing
	)
	out := sink.Record{Key: rec.Key, Time: rec.Time, Headers: hs}
	room := limit - dlqSlack(limit) - sink.SingleBatchSize(&out) - 8 // 8: the value's length varint
	if room < 0 {
		out.Key = rec.Key[:max(len(rec.Key)+room, 0)]
		cut = append(cut, "key")
		room = 0
	}
	if len(rec.Value) > room {
		out.Value = rec.Value[:room]
		cut = append(cut, "value")
	} else {
		out.Value = rec.Value
	}
	if len(rec.Headers) > len(own) {
		cut = append(cut, "headers")
	}
	hs[len(hs)-1].Value = []byte(strings.Join(cut, ","))
	return out, true
}

// maxMessageBytes reads topic's max.message.bytes (the topic's own value or
// the broker default it inherits) with DescribeConfigs. When the brokers do
// not answer it (an ACL without DescribeConfigs), Kafka's default is
// assumed and a warning says so; role names the topic in it.
func (j *Job) maxMessageBytes(ctx context.Context, role, topic string) int {
	n, err := j.describeMaxMessageBytes(ctx, topic)
	if err != nil {
		j.log.Warn("cannot read the "+role+" topic's max.message.bytes; assuming Kafka's default for sizing batches and records",
			"topic", topic, "assumed", defaultMaxMessageBytes, "err", err)
		return defaultMaxMessageBytes
	}
	return n
}

func (j *Job) describeMaxMessageBytes(ctx context.Context, topic string) (int, error) {
	const name = "max.message.bytes"
	v, err := j.describeTopicConfig(ctx, topic, name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s = %q is not a positive integer", name, v)
	}
	return n, nil
}

// maxBatchBytes is the producers' sink.Config.MaxBatchBytes: configured
// (produce.batch_max_bytes; 0 means sink's default), lowered when the
// output or the DLQ topic takes less, so that a batch of many small records
// fits either.
func (l layout) maxBatchBytes(configured int) int {
	base := configured
	if base <= 0 {
		base = sink.DefaultMaxBatchBytes
	}
	lowered := false
	for _, limit := range []int{l.outMaxBytes, l.dlqMaxBytes} {
		if limit > 0 {
			base, lowered = min(base, limit-dlqSlack(limit)-sink.SingleBatchSize(&sink.Record{})), true
		}
	}
	if !lowered {
		return configured
	}
	return max(base, 1024)
}

// countTruncated adds a committed cycle's cut-down DLQ records to the job's
// counters.
func (j *Job) countTruncated(cycle *Stats) {
	if n := cycle.DLQTruncated; n > 0 {
		j.addStats(func(s *Stats) { s.DLQTruncated += n })
	}
}
