package job_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDLQDeletedWhileRunning: an operator deletes the DLQ topic while the
// job runs (the start-up check found it). A cycle holding a poison record
// cannot then commit: the partition must stall on it (the cycle aborts
// and is retried after backoff; the job stays up, its other partitions
// go on) and nothing of its input may commit without its DLQ record.
// Once the topic exists again the partition goes on, and kgo must find
// every key once in the output and the poison record once in the DLQ.
func TestDLQDeletedWhileRunning(t *testing.T) {
	e := newEnv(t)
	ids := keysOn(0, 20)
	var first, after []*kgo.Record
	for i, id := range ids {
		r := &kgo.Record{Topic: e.raw, Partition: 0, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q}`, id)}
		if i < 10 {
			first = append(first, r)
		} else {
			after = append(after, r)
		}
	}
	for p := int32(1); p < partitions; p++ {
		after = append(after, &kgo.Record{Topic: e.raw, Partition: p, Value: fmt.Appendf(nil, `{"order_id":"other-%d"}`, p)})
	}
	cfg := e.config("0, 1, 2, 3")
	e.produce(first)
	r := e.start(cfg)
	e.waitCommitted(r, 1, 60*time.Second)
	deleteTopic(t, e, e.dlq)

	poison := &kgo.Record{Topic: e.raw, Partition: 0, Key: []byte("poison"), Value: []byte(jobtest.PoisonNotJSON)}
	e.produce(append([]*kgo.Record{poison}, after...))
	e.waitCommitted(r, 1, 60*time.Second, 1, 2, 3) // the other partitions go on
	time.Sleep(2 * time.Second)
	c, err := e.prod.Committed(e.ctx(10*time.Second), e.jobID, e.raw, partitions)
	if err != nil {
		t.Fatal(err)
	}
	if c[0] != int64(len(first)) {
		t.Errorf("partition 0 committed up to offset %d without its DLQ topic, want it held at the poison record (%d)", c[0], len(first))
	}
	select {
	case err := <-r.done:
		r.done <- err
		t.Fatalf("the job stopped while its DLQ topic was missing: %v", err)
	default:
	}

	createTopicAgain(t, e, e.dlq, 1)
	e.waitCommitted(r, 1, 60*time.Second)
	e.stop(r)
	out, dlq := e.readOutput()
	seen := map[string]int{}
	for _, o := range out {
		seen[string(o.Value)]++
	}
	for _, in := range append(first, after...) {
		if seen[string(in.Value)] != 1 {
			t.Errorf("%s is %d times in the output, want once", in.Value, seen[string(in.Value)])
		}
	}
	if len(out) != len(first)+len(after) || len(dlq) != 1 || string(dlq[0].Value) != jobtest.PoisonNotJSON {
		t.Errorf("output %d records (want %d), DLQ %d (want the poison record once)", len(out), len(first)+len(after), len(dlq))
	}
}

// TestDLQRecreatedWithFewerPartitions: the DLQ topic, 4 partitions, is
// deleted while the job runs and created again with one (a tool's
// default). Stage 3 writes its DLQ records to partition 3, which is gone:
// the job must stop, naming the DLQ topic and its counts, before it
// commits the cycle holding the bad record, and the next start must go on
// with DLQ partition 0. Before, stage 3 retried AddPartitionsToTxn for
// good: its input stalled behind the bad record until someone restarted
// the job. kgo finds every key once and the bad record once in the DLQ.
func TestDLQRecreatedWithFewerPartitions(t *testing.T) {
	e := newEnv(t)
	dlq4 := e.topic("orders-dlq4", 4)
	cfg := e.config("0, 1, 2, 3")
	cfg.Output.DLQTopic = dlq4
	var recs []*kgo.Record
	for _, id := range keysOn(3, 20) {
		recs = append(recs, &kgo.Record{Topic: e.raw, Partition: 3, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q}`, id)})
	}
	e.produce(recs[:10])
	watch := func(o *job.Options) { testhook.Set(o, testhook.Hooks{TopicWatchEvery: 200 * time.Millisecond}) }
	r := e.start(cfg, watch)
	e.waitCommitted(r, 1, 60*time.Second)
	deleteTopic(t, e, dlq4)
	createTopicAgain(t, e, dlq4, 1)
	poison := &kgo.Record{Topic: e.raw, Partition: 3, Key: []byte("poison"), Value: []byte(jobtest.PoisonNotJSON)}
	e.produce(append([]*kgo.Record{poison}, recs[10:]...))
	err := r.wait(t, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "output.dlq_topic: the DLQ topic lost partitions") || !strings.Contains(err.Error(), fmt.Sprintf("%q 4 -> 1", dlq4)) {
		t.Fatalf("want a stop naming the DLQ topic's lost partitions, got %v", err)
	}
	t.Logf("stopped: %v", err)
	c, cerr := e.prod.Committed(e.ctx(10*time.Second), e.jobID, e.raw, partitions)
	if cerr != nil {
		t.Fatal(cerr)
	}
	if c[3] != 10 {
		t.Errorf("partition 3 committed up to offset %d, want 10 (held at the bad record)", c[3])
	}

	e.runToEnd(cfg)
	out, err := jobtest.ReadCommitted(e.ctx(60*time.Second), e.brokers, e.out, partitions)
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := jobtest.ReadCommitted(e.ctx(60*time.Second), e.brokers, dlq4, 1)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, o := range out {
		seen[string(o.Value)]++
	}
	for _, in := range recs {
		if seen[string(in.Value)] != 1 {
			t.Errorf("%s is %d times in the output, want once", in.Value, seen[string(in.Value)])
		}
	}
	if len(out) != len(recs) || len(dlq) != 1 || string(dlq[0].Value) != jobtest.PoisonNotJSON {
		t.Errorf("output %d records (want %d), DLQ %d (want the bad record once)", len(out), len(recs), len(dlq))
	}
}

// keysOn returns n business keys that murmur2 puts on partition p.
func keysOn(p, n int) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("late-%d", i)
		if partition.Murmur2Partition([]byte(id), partitions) == p {
			ids = append(ids, id)
		}
	}
	return ids
}
