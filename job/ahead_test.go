package job_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestStoreAheadOfOutput: the output topic is deleted and created again
// while the state directory is kept. The store's checkpoint is then past
// the new output's end; restoring or resuming from it would lose keys, so
// the job must stop with a fatal error naming the directory to remove.
func TestStoreAheadOfOutput(t *testing.T) {
	e := newEnv(t)
	w := e.workload(31, 2_000, 0)
	e.produce(w.Records)
	cfg := e.config("0, 1, 2, 3")
	r1 := e.start(cfg)
	e.waitCommitted(r1, 1, 60*time.Second)
	e.stop(r1)

	cl := kafkatest.NewClient(t, e.brokers, e.clientOpts...)
	del := kmsg.NewPtrDeleteTopicsRequest()
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr(e.out)
	del.Topics = append(del.Topics, dt)
	del.TopicNames = []string{e.out}
	del.TimeoutMillis = 30_000
	res, err := del.RequestWith(e.ctx(30*time.Second), cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Topics {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("delete %s: %v", e.out, err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cr := kmsg.NewPtrCreateTopicsRequest()
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic, ct.NumPartitions, ct.ReplicationFactor = e.out, partitions, -1
		cr.Topics = append(cr.Topics, ct)
		cr.TimeoutMillis = 30_000
		cres, err := cr.RequestWith(e.ctx(30*time.Second), cl)
		if err == nil && kerr.ErrorForCode(cres.Topics[0].ErrorCode) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create %s again: %v %+v", e.out, err, cres)
		}
	}
	if err := kafkatest.WaitTopics(e.ctx(60*time.Second), cl, partitions, e.out); err != nil {
		t.Fatal(err)
	}
	r2 := e.start(cfg)
	err = r2.wait(t, 60*time.Second)
	if err == nil || !strings.Contains(err.Error(), "is ahead of output") || !strings.Contains(err.Error(), job.StateDir(cfg.State.Dir, 0)[:len(cfg.State.Dir)]) ||
		!strings.Contains(err.Error(), "remove the state directory") {
		t.Fatalf("want a fatal error naming the state directory that is ahead of the recreated output, got %v", err)
	}
	t.Logf("refused with: %v", err)
}
