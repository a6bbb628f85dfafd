// Package kafkatest starts Kafka brokers for tests and gives them an
// independent client (franz-go's kgo) to check what the code under test wrote.
//
// By default a test gets an embedded kfake cluster on loopback. When the
// environment variable KAFKA_BROKERS names real brokers (comma-separated
// host:port), Brokers returns those instead, so the same test runs against a
// real Apache Kafka cluster.
package kafkatest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EnvBrokers names the environment variable that selects external brokers.
const EnvBrokers = "KAFKA_BROKERS"

// External returns the brokers named by KAFKA_BROKERS, or nil.
func External() []string {
	v := strings.TrimSpace(os.Getenv(EnvBrokers))
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// NewCluster starts an embedded kfake cluster on loopback ports chosen by the
// kernel and closes it when the test ends. It has one broker unless opts
// contain kfake.NumBrokers(n).
func NewCluster(tb testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatalf("kafkatest: start kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Brokers returns external brokers when KAFKA_BROKERS is set, otherwise the
// addresses of a fresh embedded cluster started with opts.
func Brokers(tb testing.TB, opts ...kfake.Opt) []string {
	tb.Helper()
	if ext := External(); ext != nil {
		return ext
	}
	return NewCluster(tb, opts...).ListenAddrs()
}

// NewClient returns a kgo client for brokers, closed when the test ends.
// It is the independent reader and writer that checks the code under test.
func NewClient(tb testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		tb.Fatalf("kafkatest: new kgo client: %v", err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// runID makes topic names unique across test runs: a real cluster keeps its
// topics, committed offsets and transactional ids between runs.
var (
	runID    = strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36)
	topicSeq atomic.Int64
)

// TopicName returns prefix followed by a suffix unique to this process and
// call, so tests never meet each other's data on a persistent cluster. The
// result is also usable as a group or transactional id.
func TopicName(prefix string) string {
	return fmt.Sprintf("%s-%s-%d", prefix, runID, topicSeq.Add(1))
}

// SkipExternal skips the test when KAFKA_BROKERS names real brokers: it
// depends on the embedded broker's fault controls or internals, and why is
// the reason it gives.
func SkipExternal(tb testing.TB, why string) {
	tb.Helper()
	if External() != nil {
		tb.Skipf("embedded broker only (%s)", why)
	}
}

// CreateTopics creates each topic with partitions partitions and the
// cluster's default replication factor, then waits until every broker's
// metadata shows a leader for every partition: a real cluster answers
// CreateTopics before the followers and the other brokers know the topic.
func CreateTopics(tb testing.TB, brokers []string, partitions int32, topics ...string) {
	tb.Helper()
	CreateTopicsWith(tb, NewClient(tb, brokers), partitions, topics...)
}

// CreateTopicsWith is CreateTopics through an existing client.
func CreateTopicsWith(tb testing.TB, cl *kgo.Client, partitions int32, topics ...string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	for _, name := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, -1
		req.Topics = append(req.Topics, rt)
	}
	res, err := req.RequestWith(ctx, cl)
	if err != nil {
		tb.Fatalf("kafkatest: create topics %v: %v", topics, err)
	}
	for _, t := range res.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			tb.Fatalf("kafkatest: create topic %s: %v", t.Topic, err)
		}
	}
	if err := WaitTopics(ctx, cl, partitions, topics...); err != nil {
		tb.Fatalf("kafkatest: %v", err)
	}
}

// WaitTopics waits until every broker's metadata shows topics with
// partitions partitions, each with a leader, or ctx ends.
func WaitTopics(ctx context.Context, cl *kgo.Client, partitions int32, topics ...string) error {
	for {
		lag, err := topicsReady(ctx, cl, partitions, topics)
		if err == nil && lag == "" {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("topics %v not ready: %s %v", topics, lag, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// topicsReady asks every broker for the topics' metadata and describes the
// first that lacks a topic or a partition leader, or returns "".
func topicsReady(ctx context.Context, cl *kgo.Client, partitions int32, topics []string) (string, error) {
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return "", err
	}
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	for _, b := range meta.Brokers {
		res, err := req.RequestWith(ctx, cl.Broker(int(b.NodeID)))
		if err != nil {
			return "", err
		}
		for _, t := range res.Topics {
			if t.ErrorCode != 0 || int32(len(t.Partitions)) != partitions {
				return fmt.Sprintf("broker %d: topic %s: error %d, %d partitions", b.NodeID, *t.Topic, t.ErrorCode, len(t.Partitions)), nil
			}
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 || p.Leader < 0 {
					return fmt.Sprintf("broker %d: %s/%d: error %d, leader %d", b.NodeID, *t.Topic, p.Partition, p.ErrorCode, p.Leader), nil
				}
			}
		}
	}
	return "", nil
}
