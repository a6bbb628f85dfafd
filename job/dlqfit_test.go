package job

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/sink"
	"github.com/segmentio/kafka-go/protocol"
)

// TestFitDLQ: a DLQ copy that a batch of its own cannot carry within
// max.message.bytes is cut to fit, keeping reason, source, timestamp and
// key, the value's first bytes, and headers saying what was cut.
func TestFitDLQ(t *testing.T) {
	const limit = 1048588 // Kafka's default max.message.bytes
	ts := time.UnixMilli(1_700_000_000_123)
	json2MB := bytes.Repeat([]byte(`{"order_id":"o-1","pad":"xxxxxxxx"},`), 2<<20/36)
	for _, tc := range []struct {
		name       string
		key, value []byte
		headers    int
		want       string // HeaderTruncated; "" when it must pass unchanged
	}{
		{"small", []byte("k"), []byte("not json {"), 1, ""},
		{"2MB compressible JSON", []byte("o-1"), json2MB, 0, "value"},
		{"non-JSON just under max.message.bytes", []byte("k-2"), bytes.Repeat([]byte{0xfe}, 1_048_461), 2, "value,headers"},
		{"key too big", bytes.Repeat([]byte("K"), 1_100_000), []byte("v"), 0, "key,value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := fetch.Record{Key: tc.key, Value: tc.value, Timestamp: ts, Offset: 812}
			for i := range tc.headers {
				fr.Headers = append(fr.Headers, protocol.Header{Key: "h" + strconv.Itoa(i), Value: []byte("v")})
			}
			a := arena{dlqLimit: limit}
			a.reset(&fetch.Batch{Records: []fetch.Record{fr}}, 1)
			rec := a.record(&fr, "record_too_large", []byte("orders-raw"), 3)
			h := map[string]string{}
			for _, x := range rec.Headers {
				h[x.Key] = string(x.Value)
			}
			if h[HeaderReason] != "record_too_large" || h[HeaderSourceTopic] != "orders-raw" || h[HeaderSourcePartition] != "3" || h[HeaderSourceOffset] != "812" {
				t.Errorf("source headers lost: %v", h)
			}
			if !rec.Time.Equal(ts) {
				t.Errorf("timestamp %v, want %v", rec.Time, ts)
			}
			if tc.want == "" {
				if a.cut != 0 || !bytes.Equal(rec.Value, tc.value) || len(rec.Headers) != tc.headers+dlqHeaders {
					t.Fatalf("a record that fits was changed: cut=%d", a.cut)
				}
				return
			}
			if a.cut != 1 {
				t.Errorf("cut = %d, want 1", a.cut)
			}
			if size := sink.SingleBatchSize(&rec); size > limit {
				t.Errorf("cut copy takes %d bytes, more than max.message.bytes %d", size, limit)
			}
			if h[HeaderTruncated] != tc.want || h[HeaderValueSize] != strconv.Itoa(len(tc.value)) || h[HeaderKeySize] != strconv.Itoa(len(tc.key)) ||
				h[HeaderSourceTimestamp] != "1700000000123" {
				t.Errorf("headers %v: want truncated=%q value size %d key size %d", h, tc.want, len(tc.value), len(tc.key))
			}
			if !bytes.HasPrefix(tc.value, rec.Value) || !bytes.HasPrefix(tc.key, rec.Key) {
				t.Error("the copy's key or value is not a prefix of the original")
			}
			if !strings.Contains(tc.want, "key") && !bytes.Equal(rec.Key, tc.key) {
				t.Error("the key was cut although it fits")
			}
			if tc.want != "key,value" && len(tc.value) < limit && len(rec.Value) < limit*9/10 {
				t.Errorf("only %d of %d value bytes kept: most of the room was wasted", len(rec.Value), len(tc.value))
			}
		})
	}
}

// TestMaxBatchBytes: an output or DLQ topic smaller than the producer's
// default batch lowers it, so a batch of many small records fits too.
func TestMaxBatchBytes(t *testing.T) {
	if got := (layout{}).maxBatchBytes(0); got != 0 {
		t.Errorf("unknown limit: %d, want 0 (the default)", got)
	}
	if got := (layout{dlqMaxBytes: 10 << 20}).maxBatchBytes(2 << 20); got != 2<<20 {
		t.Errorf("configured 2MiB, DLQ limit 10MiB: %d", got)
	}
	if got := (layout{dlqMaxBytes: 10 << 20}).maxBatchBytes(0); got != sink.DefaultMaxBatchBytes {
		t.Errorf("large DLQ limit: %d, want the default %d", got, sink.DefaultMaxBatchBytes)
	}
	if got := (layout{dlqMaxBytes: 100_000}).maxBatchBytes(0); got <= 1024 || got+200 > 100_000 {
		t.Errorf("DLQ limit 100000: batches of %d bytes", got)
	}
	// The output topic's limit counts the same way, the smaller one wins.
	if got := (layout{outMaxBytes: 16384, dlqMaxBytes: 100_000}).maxBatchBytes(0); got <= 1024 || got+100 > 16384 {
		t.Errorf("output limit 16384, DLQ limit 100000: batches of %d bytes", got)
	}
	if got, want := (layout{outMaxBytes: 100_000, dlqMaxBytes: 16384}).maxBatchBytes(0), (layout{outMaxBytes: 16384, dlqMaxBytes: 100_000}).maxBatchBytes(0); got != want {
		t.Errorf("the smaller limit on the DLQ: batches of %d bytes, on the output %d", got, want)
	}
}
