package fetch

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// testTimeout bounds every broker interaction of one test.
const testTimeout = 30 * time.Second

func testContext(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	tb.Cleanup(cancel)
	return ctx
}

// newTopic creates a topic with one partition through kgo, so that tests run
// unchanged against KAFKA_BROKERS.
func newTopic(tb testing.TB, admin *kgo.Client, prefix string) string {
	tb.Helper()
	topic := kafkatest.TopicName(prefix)
	kafkatest.CreateTopicsWith(tb, admin, 1, topic)
	return topic
}

// newTransport returns a kafka-go transport closed when the test ends.
func newTransport(tb testing.TB) *kafka.Transport {
	tr := &kafka.Transport{ClientID: "fetch-test"}
	tb.Cleanup(tr.CloseIdleConnections)
	return tr
}

func newFetcher(tb testing.TB, brokers []string, topic string, opts Options) *Fetcher {
	tb.Helper()
	f, err := New(&kafka.Client{Addr: kafka.TCP(brokers...), Transport: newTransport(tb)}, topic, 0, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// rec is a record copied out of a Batch or a kgo fetch, for comparison.
type rec struct {
	Offset  int64
	Key     string
	Value   string
	Headers string
}

func (r rec) String() string { return fmt.Sprintf("%d:%s=%s%s", r.Offset, r.Key, r.Value, r.Headers) }

func copyBatch(dst []rec, b *Batch) []rec {
	for _, r := range b.Records {
		var h bytes.Buffer
		for _, x := range r.Headers {
			fmt.Fprintf(&h, "[%s:%s]", x.Key, x.Value)
		}
		dst = append(dst, rec{r.Offset, string(r.Key), string(r.Value), h.String()})
	}
	return dst
}

// readAll fetches from offset from until the position reaches the last
// stable offset, returning copies of the records.
func readAll(tb testing.TB, f *Fetcher, from int64) []rec {
	tb.Helper()
	ctx := testContext(tb)
	var out []rec
	err := f.ReadRange(ctx, from, ToLastStable, func(b *Batch) error {
		if n := len(b.Records); n > 0 {
			if b.Records[0].Offset < from || b.Records[n-1].Offset >= b.NextOffset {
				tb.Errorf("batch records [%d, %d] outside [%d, %d)", b.Records[0].Offset, b.Records[n-1].Offset, from, b.NextOffset)
			}
		}
		out = copyBatch(out, b)
		return nil
	})
	if err != nil {
		tb.Fatalf("read range: %v", err)
	}
	return out
}

// readKgo reads the partition read_committed with kgo, the independent
// reader, from offset from until it has seen offset last (the last record the
// test expects), then polls a little longer to catch anything extra.
func readKgo(tb testing.TB, brokers []string, topic string, from, last int64) []rec {
	tb.Helper()
	cl := kafkatest.NewClient(tb, brokers,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	var out []rec
	poll := func(ctx context.Context) {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(_ string, _ int32, err error) {
			if ctx.Err() == nil {
				tb.Fatalf("kgo fetch: %v", err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			var h bytes.Buffer
			for _, x := range r.Headers {
				fmt.Fprintf(&h, "[%s:%s]", x.Key, x.Value)
			}
			out = append(out, rec{r.Offset, string(r.Key), string(r.Value), h.String()})
		})
	}
	ctx := testContext(tb)
	for last >= from && (len(out) == 0 || out[len(out)-1].Offset < last) {
		if ctx.Err() != nil {
			tb.Fatalf("kgo read %s from %d: offset %d not seen (got %d records)", topic, from, last, len(out))
		}
		poll(ctx)
	}
	extra, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	for extra.Err() == nil {
		poll(extra)
	}
	return out
}

// endOffsets returns the high watermark and last stable offset of
// partition 0, asked with kgo.
func endOffsets(tb testing.TB, cl *kgo.Client, topic string) (hwm, lso int64) {
	tb.Helper()
	return listEnd(tb, cl, topic, 0), listEnd(tb, cl, topic, 1)
}

// lastStable asks for the last stable offset of partition 0 with kgo.
func lastStable(tb testing.TB, cl *kgo.Client, topic string) int64 {
	tb.Helper()
	return listEnd(tb, cl, topic, 1)
}

// listEnd asks for the end offset of partition 0 at an isolation level.
func listEnd(tb testing.TB, cl *kgo.Client, topic string, isolation int8) int64 {
	tb.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	res, err := req.RequestWith(testContext(tb), cl)
	if err != nil {
		tb.Fatalf("list offsets: %v", err)
	}
	p := res.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		tb.Fatalf("list offsets: error code %d", p.ErrorCode)
	}
	return p.Offset
}

// txnProducer writes transactions with kgo.
type txnProducer struct {
	tb    testing.TB
	cl    *kgo.Client
	topic string
	open  bool
	cur   []rec // records of the open transaction
}

func newTxnProducer(tb testing.TB, brokers []string, topic, id string, opts ...kgo.Opt) *txnProducer {
	opts = append(txnProducerOpts(brokers, topic, id), opts...)
	return &txnProducer{tb: tb, cl: kafkatest.NewClient(tb, brokers, opts...), topic: topic}
}

// txnProducerOpts are the kgo options of a transactional test writer.
func txnProducerOpts(brokers []string, topic, id string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.TransactionalID(id),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		// kgo v1.22.3's KIP-890 part 2 path (produce v12+) sometimes
		// turns EndTransaction(TryCommit) into an abort after a
		// successful ProduceSync+Flush, logs "no produce succeeded in
		// this transaction but produces were attempted" and returns
		// nil. Classic transactions (AddPartitionsToTxn, the protocol
		// sink/ uses) write the same log and avoid it.
		kgo.MaxVersions(kversion.V3_9_0()),
	}
}

// produce writes records (one kgo batch per call), opening a transaction
// first if none is open, and returns them with their offsets.
func (p *txnProducer) produce(topic string, kvs ...[2]string) []rec {
	p.tb.Helper()
	if !p.open {
		if err := p.cl.BeginTransaction(); err != nil {
			p.tb.Fatalf("begin transaction: %v", err)
		}
		p.open = true
	}
	out := produceWith(p.tb, p.cl, topic, kvs...)
	p.cur = append(p.cur, out...)
	return out
}

// end commits or aborts the open transaction and returns its records.
func (p *txnProducer) end(commit bool) []rec {
	p.tb.Helper()
	if !p.open {
		return nil
	}
	how := kgo.TryAbort
	if commit {
		how = kgo.TryCommit
	}
	if err := p.cl.EndTransaction(testContext(p.tb), how); err != nil {
		p.tb.Fatalf("end transaction (commit=%v): %v", commit, err)
	}
	p.open = false
	out := p.cur
	p.cur = nil
	return out
}

// produceWith writes records with cl in one ProduceSync call.
func produceWith(tb testing.TB, cl *kgo.Client, topic string, kvs ...[2]string) []rec {
	tb.Helper()
	rs := make([]*kgo.Record, len(kvs))
	for i, kv := range kvs {
		rs[i] = &kgo.Record{Topic: topic, Partition: 0, Key: []byte(kv[0]), Value: []byte(kv[1])}
		if i%3 == 1 {
			rs[i].Headers = []kgo.RecordHeader{{Key: "h", Value: []byte(kv[0])}, {Key: "trace", Value: nil}}
		}
	}
	res := cl.ProduceSync(testContext(tb), rs...)
	if err := res.FirstErr(); err != nil {
		tb.Fatalf("produce: %v", err)
	}
	out := make([]rec, len(res))
	for i, r := range res {
		var h bytes.Buffer
		for _, x := range r.Record.Headers {
			fmt.Fprintf(&h, "[%s:%s]", x.Key, x.Value)
		}
		out[i] = rec{r.Record.Offset, string(r.Record.Key), string(r.Record.Value), h.String()}
	}
	return out
}

func sortByOffset(rs []rec) []rec {
	slices.SortFunc(rs, func(a, b rec) int { return int(a.Offset - b.Offset) })
	return rs
}

func diffRecs(tb testing.TB, what string, got, want []rec) {
	tb.Helper()
	if slices.Equal(got, want) {
		return
	}
	n := min(len(got), len(want))
	for i := 0; i < n; i++ {
		if got[i] != want[i] {
			tb.Fatalf("%s: %d records, want %d; first difference at %d: got %v, want %v", what, len(got), len(want), i, got[i], want[i])
		}
	}
	tb.Fatalf("%s: %d records, want %d (got %v..., want %v...)", what, len(got), len(want), got[n:min(len(got), n+3)], want[n:min(len(want), n+3)])
}

// kfakeCluster starts an embedded cluster; n brokers need one port each,
// since kafkatest.NewCluster's Ports(0) otherwise caps the cluster at one.
func kfakeCluster(tb testing.TB, n int, opts ...kfake.Opt) *kfake.Cluster {
	kafkatest.SkipExternal(tb, "drives kfake's fault controls and leader moves")
	ports := make([]int, n)
	return kafkatest.NewCluster(tb, append([]kfake.Opt{kfake.NumBrokers(n), kfake.Ports(ports...)}, opts...)...)
}

// txnsDecided reports whether every transaction on partition 0 is decided
// (last stable offset = high watermark), waiting up to two seconds for
// markers. The kgo test writer (v1.22.3) sometimes returns nil from
// EndTransaction without sending EndTxn, which leaves its transaction open
// until the transaction timeout; tests use this to tell that writer fault
// from a fetcher fault.
func txnsDecided(tb testing.TB, cl *kgo.Client, topic string) bool {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		hwm, lso := endOffsets(tb, cl, topic)
		if hwm == lso {
			return true
		}
		if time.Now().After(deadline) {
			tb.Logf("%s: a transaction is still open after its EndTransaction returned (high watermark %d, last stable offset %d): kgo writer fault", topic, hwm, lso)
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
