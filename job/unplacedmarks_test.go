package job_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
)

// TestUnplacedMarksRerun: on record time a cycle that enters a new
// generation commits a mark naming the output offset of the generation's
// first record (marks.go); a store rebuilt later files each output record
// by the marks. When the broker does not say where the cycle's records
// begin, the mark cannot be placed, and the cycle must be aborted and run
// again rather than committed without it.
//
// The broker here stores the cycle's only produce request and the answer
// is lost (held past the request timeout); the resend of the same batch is
// answered DUPLICATE_SEQUENCE_NUMBER, without its offset, as brokers
// answer a batch they stored earlier than the ones they keep the offsets
// of. The scenario is TestRestoreWindowLateRecords' "poison record, state
// removed": the late key is emitted at a clock its own timestamp does not
// show, and only the marks let the rebuilt store drop its replay. With the
// abort left out (the cycle committed with the marks of its earlier
// generations only) the replay passed: `key "late-4" is 2 times in the
// output, want once`.
func TestUnplacedMarksRerun(t *testing.T) {
	kafkatest.SkipExternal(t, "answers a produce with kfake's request controls")
	e, T, rec, cfg := lateEnv(t)
	ids := keysOn(0, 2)
	late, newer := ids[0], ids[1]

	// The first output produce of partition 0 (R1) is stored after its
	// answer timed out; its resend (R2) is answered without an offset;
	// later ones pass.
	var (
		calls    atomic.Int32
		resent   = make(chan struct{})
		r1Stored = make(chan struct{})
	)
	e.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		pr := r.(*kmsg.ProduceRequest)
		if pr.TransactionID == nil || len(pr.Topics) != 1 || pr.Topics[0].Topic != e.out ||
			len(pr.Topics[0].Partitions) != 1 || pr.Topics[0].Partitions[0].Partition != 0 {
			return nil, nil, false
		}
		switch calls.Add(1) {
		case 1: // R1: held until its resend arrives, then stored
			e.cluster.SleepControl(func() {
				select {
				case <-resent:
				case <-time.After(30 * time.Second):
				}
			})
			close(r1Stored)
			return nil, nil, false
		case 2: // R2: the same batch again
			close(resent)
			e.cluster.SleepControl(func() {
				<-r1Stored
				time.Sleep(100 * time.Millisecond) // R1's handling, after its control returned
			})
			return duplicateSequence(pr), nil, true
		}
		return nil, nil, false
	})
	e.produce([]*kgo.Record{
		poisonAt(e.raw, T.Add(60*time.Minute)),
		rec(late, 0, 1), rec(newer, 100*time.Minute, 1),
	})
	r := e.start(cfg, func(o *job.Options) { o.RequestTimeout = time.Second })
	e.waitCommitted(r, 1, 60*time.Second)
	e.stop(r)
	if n := calls.Load(); n < 3 {
		t.Fatalf("%d output produces of partition 0, want the held one, its resend and the cycle's rerun", n)
	}
	e.replayLate(cfg, rec, late, T, true)
	if n := e.outputOf(newer, T); n != 1 {
		t.Errorf("key %q is %d times in the output, want once", newer, n)
	}
}

// duplicateSequence answers pr (one topic, one partition) with
// DUPLICATE_SEQUENCE_NUMBER and no offset.
func duplicateSequence(pr *kmsg.ProduceRequest) kmsg.Response {
	resp := pr.ResponseKind().(*kmsg.ProduceResponse)
	resp.Version = pr.Version
	rt := kmsg.NewProduceResponseTopic()
	rt.Topic, rt.TopicID = pr.Topics[0].Topic, pr.Topics[0].TopicID
	rp := kmsg.NewProduceResponseTopicPartition()
	rp.Partition = pr.Topics[0].Partitions[0].Partition
	rp.ErrorCode = kerr.DuplicateSequenceNumber.Code
	rp.BaseOffset = -1
	rt.Partitions = append(rt.Partitions, rp)
	resp.Topics = append(resp.Topics, rt)
	return resp
}
