package job_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
)

// TestOffsetsCommittedBesideTheProduce: a cycle's TxnOffsetCommit goes to
// the coordinator while its produce requests are still out (the stage
// knows where its records land), not after their acknowledgements. The
// broker holds every transactional produce to the output for heldFor and
// counts the offset commits of the same stage (transactional id) that
// arrive meanwhile; the output, read by
// kgo, must still hold every key once, and the committed offsets' metadata
// the output's end (the output check of a restart passes).
func TestOffsetsCommittedBesideTheProduce(t *testing.T) {
	// Long enough that a stage starved of CPU by the tests of other
	// packages still sends its offsets while the produce is held: with
	// 50ms, 6 of 16 arrived beside it in one CI run.
	const heldFor = 200 * time.Millisecond
	kafkatest.SkipExternal(t, "holds produce requests with kfake's request controls")
	e := newEnv(t)
	w := e.workload(23, 3_000, 1_000)
	var (
		mu              sync.Mutex
		held            = map[string]int{} // output produces held, by transactional id
		commits, beside atomic.Int64
	)
	e.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		pr := r.(*kmsg.ProduceRequest)
		if pr.TransactionID == nil || len(pr.Topics) == 0 || pr.Topics[0].Topic != e.out {
			return nil, nil, false
		}
		id := *pr.TransactionID
		mu.Lock()
		held[id]++
		mu.Unlock()
		e.cluster.SleepControl(func() { time.Sleep(heldFor) })
		mu.Lock()
		held[id]--
		mu.Unlock()
		return nil, nil, false
	})
	e.cluster.ControlKey(int16(kmsg.TxnOffsetCommit), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		commits.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if held[r.(*kmsg.TxnOffsetCommitRequest).TransactionalID] > 0 {
			beside.Add(1)
		}
		return nil, nil, false
	})
	cfg := e.config("0, 1, 2, 3")
	r := e.start(cfg)
	e.feed(w, 30*time.Millisecond)
	e.waitCommitted(r, 1, 60*time.Second)
	e.stop(r)
	e.verify(w, r.job.Stats())
	t.Logf("%d of %d TxnOffsetCommit requests arrived while an output produce was held", beside.Load(), commits.Load())
	if commits.Load() == 0 || beside.Load()*2 < commits.Load() {
		t.Fatalf("%d of %d offset commits were sent beside a produce: want at least half", beside.Load(), commits.Load())
	}
	// A restart checks the committed metadata against the output's end
	// before its stages get ready.
	r = e.start(cfg)
	for deadline := time.Now().Add(30 * time.Second); r.job.Stats().Ready < partitions; time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("the restart failed: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restart was not ready within 30s: %+v", r.job.Stats())
		}
	}
	e.stop(r)
}
