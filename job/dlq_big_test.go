package job_test

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDLQTooBig: records whose DLQ copy cannot fit the DLQ topic's
// max.message.bytes (a 2 MB JSON record the raw topic took compressed,
// and a non-JSON record just under max.message.bytes, which the DLQ
// headers push over) must not block their partition: a cut-down copy
// reaches the DLQ, the metric counts it, and every later key comes out.
// Before, the DLQ produce failed with MESSAGE_TOO_LARGE on every restart.
func TestDLQTooBig(t *testing.T) {
	t.Run("default max.message.bytes", func(t *testing.T) { testDLQTooBig(t, 0, 1_048_461) })
	// A DLQ topic that takes less than the raw one: the limit is read
	// from the topic at start-up, not assumed.
	t.Run("DLQ max.message.bytes 200000", func(t *testing.T) { testDLQTooBig(t, 200_000, 300_000) })
}

func testDLQTooBig(t *testing.T, dlqLimit, binSize int) {
	e := newEnv(t)
	if dlqLimit > 0 {
		setTopicConfig(t, e, e.dlq, "max.message.bytes", strconv.Itoa(dlqLimit))
	}
	bigJSON := bytes.Repeat([]byte(`{"order_id":"o-big","pad":"xxxxxxxxxxxxxxxx"},`), 2<<20/47)
	bigJSON = append(append([]byte("["), bigJSON[:len(bigJSON)-1]...), ']')
	notJSON := bytes.Repeat([]byte{0xfe}, binSize)
	bigs := []struct {
		key    string
		value  []byte
		reason string
		codec  kgo.CompressionCodec
	}{
		{"big-json", bigJSON, "record_too_large", kgo.GzipCompression()},
		{"big-bin", notJSON, "not_json", kgo.NoCompression()},
	}
	for _, b := range bigs {
		cl := kafkatest.NewClient(t, e.brokers, kgo.ProducerBatchCompression(b.codec), kgo.ProducerBatchMaxBytes(4<<20),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		rec := &kgo.Record{Topic: e.raw, Partition: int32(partition.Murmur2Partition([]byte(b.key), partitions)), Key: []byte(b.key), Value: b.value}
		if err := cl.ProduceSync(e.ctx(30*time.Second), rec).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", b.key, err)
		}
		if e.prod.End[e.raw] == nil {
			e.prod.End[e.raw] = map[int32]int64{}
		}
		e.prod.End[e.raw][rec.Partition] = max(e.prod.End[e.raw][rec.Partition], rec.Offset+1)
	}
	// Later keys on every partition, the big records' included.
	w := e.workload(21, 2_000, 300)
	e.produce(w.Records)
	r := e.runToEnd(e.config("0, 1, 2, 3"))
	out, dlq := e.readOutput()
	var rest []*kgo.Record
	found := 0
	for _, d := range dlq {
		h := map[string]string{}
		for _, x := range d.Headers {
			h[x.Key] = string(x.Value)
		}
		i := -1
		for j, b := range bigs {
			if string(d.Key) == b.key {
				i = j
			}
		}
		if i < 0 {
			rest = append(rest, d)
			continue
		}
		found++
		b := bigs[i]
		if h[job.HeaderReason] != b.reason || h[job.HeaderTruncated] != "value" || h[job.HeaderValueSize] != strconv.Itoa(len(b.value)) ||
			h[job.HeaderSourceTopic] != e.raw || h[job.HeaderSourceOffset] == "" || h[job.HeaderSourceTimestamp] == "" {
			t.Errorf("DLQ copy of %s: headers %v", b.key, h)
		}
		if len(d.Value) == 0 || !bytes.HasPrefix(b.value, d.Value) {
			t.Errorf("DLQ copy of %s: value of %d bytes is not a prefix of the record's", b.key, len(d.Value))
		}
	}
	if found != len(bigs) {
		t.Errorf("%d of the %d oversize records reached the DLQ", found, len(bigs))
	}
	rep := w.Check(out, rest)
	for _, p := range rep.Problems {
		t.Error(p)
	}
	st := r.job.Stats()
	if st.DLQTruncated != uint64(len(bigs)) {
		t.Errorf("DLQTruncated = %d, want %d", st.DLQTruncated, len(bigs))
	}
	checkCollector(t, r.job, map[string]float64{"dedupstream_dlq_truncated_records_total": float64(len(bigs))})
}

// setTopicConfig sets one config of topic with IncrementalAlterConfigs.
func setTopicConfig(t *testing.T, e *env, topic, name, value string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = topic
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = name, kmsg.StringPtr(value)
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(e.ctx(10*time.Second), kafkatest.NewClient(t, e.brokers, e.clientOpts...))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("set %s=%s on %s: %v", name, value, topic, err)
		}
	}
}
