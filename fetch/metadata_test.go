package fetch

import (
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPartitionCountsUncached: a topic grown after the transport cached its
// metadata (refreshed once an hour here) still shows its old count through
// kafka.Client.Metadata; PartitionCounts must return the new one at once,
// and leave out a topic that does not exist.
func TestPartitionCountsUncached(t *testing.T) {
	c := kfakeCluster(t, 1)
	brokers := c.ListenAddrs()
	admin := kafkatest.NewClient(t, brokers)
	topic := newTopic(t, admin, "grow")
	tr := newTransport(t)
	tr.MetadataTTL = time.Hour
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}
	ctx := testContext(t)
	if _, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}}); err != nil {
		t.Fatal(err) // fills the transport's cache
	}

	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, 3
	req.Topics = append(req.Topics, rt)
	res, err := req.RequestWith(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(res.Topics[0].ErrorCode); err != nil {
		t.Fatal(err)
	}

	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	cached := len(md.Topics[0].Partitions)
	counts, err := PartitionCounts(ctx, client, []string{topic, "no-such-topic"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if counts[topic] != 3 || len(counts) != 1 {
		t.Errorf("PartitionCounts = %v, want %s: 3 and nothing else (the transport's cache says %d)", counts, topic, cached)
	}
	t.Logf("cached metadata: %d partitions, PartitionCounts: %v", cached, counts)
}
