package harness

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupstream/dedupstream/job"
)

// TestDropTopics: dropTopics deletes the named topics and the partitions
// topic of a job named after one, leaves every other topic, and says
// nothing of names that do not exist. The topics are listed by a Metadata request.
func TestDropTopics(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	made := []string{"run-out", "run-out-dlq", job.PartitionsTopic("run-out"), "other", job.PartitionsTopic("other")}
	if err := createTopics(ctx, cl, made, 2, 1); err != nil {
		t.Fatal(err)
	}
	var said bytes.Buffer
	dropTopics(ctx, cl, NewProgress(&said, 0), "run-out", "run-out-dlq", "never-made")
	res, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl) // every topic
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, tp := range res.Topics {
		left = append(left, *tp.Topic)
	}
	slices.Sort(left)
	if want := []string{"other", "other-partitions"}; !slices.Equal(left, want) {
		t.Errorf("topics left %q, want %q", left, want)
	}
	if said.Len() > 0 {
		t.Errorf("dropTopics said %q, want nothing", said.String())
	}
}
