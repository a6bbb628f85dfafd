// Package kafkatest starts Kafka brokers for tests and gives them an
// independent client (franz-go's kgo) to check what the code under test wrote.
//
// By default a test gets an embedded kfake cluster on loopback. When the
// environment variable KAFKA_BROKERS names real brokers (comma-separated
// host:port), Brokers returns those instead, so the same test runs against a
// real Apache Kafka cluster.
package kafkatest

import (
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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
