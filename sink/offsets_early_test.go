package sink

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAddOffsetsEarly: AddOffsetsToTxn sent right after the first produce
// reaches the coordinator before that (held) produce is answered: the two
// overlap;
// SendOffsets then sends none of its own, and the transaction commits its
// records and offsets. When the early call fails, SendOffsets sends it
// again and the transaction still commits.
func TestAddOffsetsEarly(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "overlaps", true: "fails-then-resent"}[fail], func(t *testing.T) {
			e := newFakeEnv(t)
			out, in := e.topic(1), e.topic(1)
			ctx := ctxT(t)
			p := e.producer("early", func(c *Config) { c.MaxInFlight = 5; c.RetryTimeout = time.Second })
			var (
				adds, during atomic.Int32
				answered     atomic.Bool // the first produce was answered
			)
			e.cluster.ControlKey(int16(kmsg.AddOffsetsToTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
				e.cluster.KeepControl()
				n := adds.Add(1)
				if !answered.Load() {
					during.Add(1)
				}
				if fail && n == 1 {
					resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
					resp.ErrorCode = kerr.InvalidTxnState.Code // not retried: the early call fails
					return resp, nil, true
				}
				return nil, nil, false
			})
			var held atomic.Bool
			e.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
				e.cluster.KeepControl()
				if r.(*kmsg.ProduceRequest).TransactionID == nil || held.Swap(true) {
					return nil, nil, false
				}
				e.cluster.SleepControl(func() { time.Sleep(200 * time.Millisecond) })
				answered.Store(true)
				return nil, nil, false
			})
			recs := makeRecords("e", 50)
			if err := p.Begin(); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Produce(ctx, out, 0, recs); err != nil {
				t.Fatal(err)
			}
			p.AddOffsetsEarly(ctx, "early-group")
			if err := p.SendOffsets(ctx, Group{ID: "early-group"}, []Offset{{Topic: in, Partition: 0, Offset: 7}}); err != nil {
				t.Fatal(err)
			}
			if err := p.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			want := map[bool]int32{false: 1, true: 2}[fail]
			if adds.Load() != want || during.Load() != 1 {
				t.Errorf("%d AddOffsetsToTxn (want %d), %d of them before the first produce was answered (want 1)", adds.Load(), want, during.Load())
			}
			if got := keys(e.drain(out, 0, false)); !slices.Equal(got, recordKeys(recs)) {
				t.Errorf("output %v, want %v", got, recordKeys(recs))
			}
			if got := e.fetchOffsets("early-group", in, 0); got[0] != 7 {
				t.Errorf("committed offset %d, want 7", got[0])
			}
		})
	}
}
