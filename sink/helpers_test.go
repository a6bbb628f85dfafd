package sink

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// env is one broker setup for a test: the kafka-go transport under test and
// an independent kgo client to check what it wrote.
type env struct {
	t         testing.TB
	cluster   *kfake.Cluster // nil with external brokers
	brokers   []string
	transport *kafka.Transport
	admin     *kgo.Client
}

// newEnv uses KAFKA_BROKERS when set, else an embedded kfake cluster.
func newEnv(t testing.TB, opts ...kfake.Opt) *env {
	t.Helper()
	return setupEnv(t, kafkatest.Brokers(t, opts...), nil)
}

// newFakeEnv always uses kfake: tests of broker faults need its controls.
func newFakeEnv(t testing.TB, opts ...kfake.Opt) *env {
	t.Helper()
	kafkatest.SkipExternal(t, "drives kfake's fault controls")
	c := kafkatest.NewCluster(t, opts...)
	return setupEnv(t, c.ListenAddrs(), c)
}

func setupEnv(t testing.TB, brokers []string, c *kfake.Cluster) *env {
	tr := &kafka.Transport{DialTimeout: 2 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return &env{
		t:         t,
		cluster:   c,
		brokers:   brokers,
		transport: tr,
		admin:     kafkatest.NewClient(t, brokers),
	}
}

var sentinelSeq atomic.Int64

// topic creates a topic named after the test.
func (e *env) topic(partitions int32) string {
	e.t.Helper()
	name := regexp.MustCompile(`[^a-zA-Z0-9._-]+`).ReplaceAllString(e.t.Name(), "-")
	name = kafkatest.TopicName(strings.Trim(name, "-"))
	kafkatest.CreateTopicsWith(e.t, e.admin, partitions, name)
	return name
}

// config returns a config with short timeouts for tests; produce requests
// go on the producer's own connections (Dialer), as in the job.
func (e *env) config(txnID string) Config {
	return Config{
		Client:             &kafka.Client{Addr: kafka.TCP(e.brokers...), Transport: e.transport},
		Dialer:             DialerFor(e.transport),
		TransactionalID:    txnID,
		TransactionTimeout: 30 * time.Second,
		RequestTimeout:     2 * time.Second,
		RetryTimeout:       10 * time.Second,
		RetryBackoff:       5 * time.Millisecond,
		MaxRetryBackoff:    100 * time.Millisecond,
	}
}

// producer returns an initialised producer.
func (e *env) producer(txnID string, mod ...func(*Config)) *Producer {
	e.t.Helper()
	cfg := e.config(txnID)
	for _, m := range mod {
		m(&cfg)
	}
	p, err := NewProducer(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Init(ctx); err != nil {
		e.t.Fatalf("init %s: %v", txnID, err)
	}
	return p
}

// drain returns the records of a partition that a read_committed (or, with
// uncommitted, read_uncommitted) kgo consumer sees. It first appends a
// non-transactional sentinel record and reads up to it: once the sentinel is
// visible, every transaction before it has been decided. Sentinels are left
// out of the result.
func (e *env) drain(topic string, partition int32, uncommitted bool) []*kgo.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sentinel := fmt.Sprintf("%s%d", sentinelPrefix, sentinelSeq.Add(1))
	prod := kafkatest.NewClient(e.t, e.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: partition, Key: []byte(sentinel)}).FirstErr(); err != nil {
		e.t.Fatalf("produce sentinel: %v", err)
	}
	level := kgo.ReadCommitted()
	if uncommitted {
		level = kgo.ReadUncommitted()
	}
	cons := kafkatest.NewClient(e.t, e.brokers,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(level),
		kgo.FetchMaxWait(50*time.Millisecond),
	)
	var out []*kgo.Record
	for {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			e.t.Fatalf("drain %s/%d: sentinel not seen after %d records: %v", topic, partition, len(out), err)
		}
		fs.EachError(func(t string, p int32, err error) { e.t.Fatalf("drain %s/%d: %v", t, p, err) })
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case string(r.Key) == sentinel:
				done = true
			case !strings.HasPrefix(string(r.Key), sentinelPrefix):
				out = append(out, r)
			}
		})
		if done {
			return out
		}
	}
}

const sentinelPrefix = "__sentinel__"

// explainMissing describes the log of a partition as written (read
// uncommitted) next to what a read_committed reader returned (got): for
// each record read_committed left out, its offset, producer id and epoch.
// It found a real cluster's time retention deleting records written with
// the tests' fixed old timestamps (testenv/kafka.sh now turns it off).
func (e *env) explainMissing(topic string, partition int32, got []string) string {
	seen := map[string]bool{}
	for _, k := range got {
		seen[k] = true
	}
	var hidden []string
	all := e.drain(topic, partition, true)
	for _, r := range all {
		if !seen[string(r.Key)] {
			hidden = append(hidden, fmt.Sprintf("%d:%s(pid %d epoch %d)", r.Offset, r.Key, r.ProducerID, r.ProducerEpoch))
		}
	}
	return fmt.Sprintf("read_uncommitted has %d records; read_committed left out %v", len(all), hidden)
}

// keys returns the record keys as strings.
func keys(rs []*kgo.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r.Key)
	}
	return out
}

// makeRecords returns n records with keys prefix-0 ... prefix-(n-1).
func makeRecords(prefix string, n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{
			Key:     fmt.Appendf(nil, "%s-%d", prefix, i),
			Value:   fmt.Appendf(nil, "value of %s-%d", prefix, i),
			Headers: []Header{{Key: "src", Value: []byte(prefix)}},
			Time:    t0.Add(time.Duration(i) * time.Millisecond),
		}
	}
	return recs
}

func recordKeys(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Key)
	}
	return out
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fetchOffsets returns the committed offsets of group for topic partitions,
// read with kgo (OffsetFetch, require_stable), -1 where none.
func (e *env) fetchOffsets(group, topic string, partitions ...int32) []int64 {
	e.t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	req.RequireStable = true
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, partitions
	req.Topics = append(req.Topics, rt)
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := req.RequestWith(context.Background(), e.admin)
		if err != nil {
			e.t.Fatalf("offset fetch: %v", err)
		}
		code := res.ErrorCode
		out := make([]int64, len(partitions))
		for i := range out {
			out[i] = -2
		}
		for _, t := range res.Topics {
			for _, p := range t.Partitions {
				if i := slices.Index(partitions, p.Partition); i >= 0 && t.Topic == topic {
					out[i] = p.Offset
					if p.ErrorCode != 0 {
						code = p.ErrorCode
					}
				}
			}
		}
		if code == kerr.UnstableOffsetCommit.Code && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err := kerr.ErrorForCode(code); err != nil {
			e.t.Fatalf("offset fetch %s: %v", group, err)
		}
		return out
	}
}
