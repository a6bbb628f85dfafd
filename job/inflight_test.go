package job_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
)

// TestProduceWindowUnderFaults runs the job with five produce requests in
// flight and small batches (several per cycle) while every seventh
// transactional produce loses its connection and every eleventh is held
// past the request timeout and then applied: the output, read by kgo,
// must hold every key once and the accounting must add up.
func TestProduceWindowUnderFaults(t *testing.T) {
	kafkatest.SkipExternal(t, "drives kfake's request controls")
	e := newEnv(t)
	w := e.workload(17, 6_000, 1_500)
	var n, cut, late atomic.Int64
	var stop atomic.Bool
	e.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if r.(*kmsg.ProduceRequest).TransactionID == nil || stop.Load() {
			return nil, nil, false
		}
		switch i := n.Add(1); {
		case i%7 == 0:
			cut.Add(1)
			return nil, errors.New("injected: close connection"), true
		case i%11 == 0:
			late.Add(1)
			e.cluster.SleepControl(func() { time.Sleep(400 * time.Millisecond) })
		}
		return nil, nil, false
	})
	cfg := e.config("0, 1, 2, 3")
	cfg.Produce.MaxInFlight, cfg.Produce.BatchMaxBytes = 5, 4<<10
	r := e.start(cfg, func(o *job.Options) {
		o.RequestTimeout = 250 * time.Millisecond
		o.RetryTimeout = 3 * time.Second
	})
	e.feed(w, 20*time.Millisecond)
	e.waitCommitted(r, 1, 60*time.Second)
	stop.Store(true)
	e.stop(r)
	st := r.job.Stats()
	t.Logf("%d transactional produces, %d cut, %d answered late; %d recoveries", n.Load(), cut.Load(), late.Load(), st.Recoveries)
	if cut.Load() == 0 || late.Load() == 0 {
		t.Fatalf("faults did not fire: %d cut, %d late", cut.Load(), late.Load())
	}
	e.verify(w, st)
}
