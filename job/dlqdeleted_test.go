package job_test

import (
	"fmt"
	"testing"
	"time"

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
