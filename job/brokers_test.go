package job

import (
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/config"
)

// TestNewRefusesBadBrokers: a config built in code, not by config.Load,
// cannot hand kafka-go an address it panics on.
func TestNewRefusesBadBrokers(t *testing.T) {
	for _, b := range []string{"h1:9092,h2:9092", "h1", "h1:0", ":9092", "h 1:9092"} {
		cfg := &config.Config{Kafka: config.Kafka{Brokers: []string{b}}, Assignment: config.Assignment{Mode: "static", Partitions: []int{0}}}
		if _, err := New(cfg, Options{}); err == nil || !strings.Contains(err.Error(), "kafka.brokers[0]") {
			t.Errorf("broker %q: want a kafka.brokers[0] error, got %v", b, err)
		}
	}
}
