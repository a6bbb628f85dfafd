package job_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// recreateTopic deletes topic and creates it again, empty, with n
// partitions, as an operator does with kafka-topics --delete / --create.
func recreateTopic(t *testing.T, e *env, topic string, n int32) {
	t.Helper()
	deleteTopic(t, e, topic)
	createTopicAgain(t, e, topic, n)
}

// deleteTopic deletes topic, as kafka-topics --delete does.
func deleteTopic(t *testing.T, e *env, topic string) {
	t.Helper()
	cl := kafkatest.NewClient(t, e.brokers, e.clientOpts...)
	del := kmsg.NewPtrDeleteTopicsRequest()
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr(topic)
	del.Topics = append(del.Topics, dt)
	del.TopicNames = []string{topic}
	del.TimeoutMillis = 30_000
	res, err := del.RequestWith(e.ctx(30*time.Second), cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Topics {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("delete %s: %v", topic, err)
		}
	}
}

// createTopicAgain creates the deleted topic again, empty, with n
// partitions, retrying while the broker still finishes the deletion.
func createTopicAgain(t *testing.T, e *env, topic string, n int32) {
	t.Helper()
	cl := kafkatest.NewClient(t, e.brokers, e.clientOpts...)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cr := kmsg.NewPtrCreateTopicsRequest()
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic, ct.NumPartitions, ct.ReplicationFactor = topic, n, -1
		cr.Topics = append(cr.Topics, ct)
		cr.TimeoutMillis = 30_000
		cres, err := cr.RequestWith(e.ctx(30*time.Second), cl)
		if err == nil && kerr.ErrorForCode(cres.Topics[0].ErrorCode) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create %s again: %v %+v", topic, err, cres)
		}
	}
	if err := kafkatest.WaitTopics(e.ctx(60*time.Second), cl, n, topic); err != nil {
		t.Fatal(err)
	}
}

// TestStoreAheadOfOutput: the output topic is deleted and created again
// while the state directory is kept, and the group's offsets are gone too
// (deleted, as when they expire), so only the store's checkpoint, past the
// new output's end, tells. Restoring or resuming from it would lose keys,
// so the job must stop with ErrTopics (exit 2) naming the directory and
// dedupstream migrate.
func TestStoreAheadOfOutput(t *testing.T) {
	e := newEnv(t)
	w := e.workload(31, 2_000, 0)
	e.produce(w.Records)
	cfg := e.config("0, 1, 2, 3")
	e.runToEnd(cfg)

	recreateTopic(t, e, e.out, partitions)
	deleteGroup(t, e, e.jobID)
	r2 := e.start(cfg)
	err := r2.wait(t, 60*time.Second)
	if !errors.Is(err, job.ErrTopics) || !strings.Contains(err.Error(), "is ahead of output") || !strings.Contains(err.Error(), job.StateDir(cfg.State.Dir, 0)[:len(cfg.State.Dir)]) ||
		!strings.Contains(err.Error(), "dedupstream migrate") {
		t.Fatalf("want ErrTopics naming the state directory that is ahead of the recreated output and dedupstream migrate, got %v", err)
	}
	t.Logf("refused with: %v", err)
}
