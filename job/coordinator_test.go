package job_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestStartWhileGroupCoordinatorMoves: on a fresh or restarting cluster the
// group coordinator answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
// for a while. The start-up check of the recorded partition count must ask
// again instead of stopping the job (found on 3 fresh Kafka 4.4 brokers:
// "read committed offsets of group ...: [16] Not Coordinator For Group",
// exit 1), and the output must stay exact.
func TestStartWhileGroupCoordinatorMoves(t *testing.T) {
	kafkatest.SkipExternal(t, "drives kfake's request controls")
	e := newEnv(t)
	w := e.workload(31, 1_500, 300)
	var seen atomic.Int64
	codes := []int16{kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code}
	e.cluster.ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		n := seen.Add(1)
		if int(n) > len(codes) {
			return nil, nil, false // and the control is dropped: the broker answers from now on
		}
		e.cluster.KeepControl()
		res := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		res.Version = req.GetVersion()
		res.ErrorCode = codes[n-1]
		for _, g := range req.(*kmsg.OffsetFetchRequest).Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = g.Group, codes[n-1]
			res.Groups = append(res.Groups, rg)
		}
		return res, nil, true
	})
	r := e.start(e.config("0, 1, 2, 3"))
	e.feed(w, 10*time.Millisecond)
	e.waitCommitted(r, 1, 60*time.Second)
	e.stop(r)
	if n := seen.Load(); n <= int64(len(codes)) {
		t.Fatalf("only %d offset fetches seen; the faults were not all served", n)
	}
	e.verify(w, r.job.Stats())
}
