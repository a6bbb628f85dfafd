package sink

import (
	"context"
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
			recs := e.heldProduce(ctx, p, out, "e", &answered)
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

// TestSendOffsetsAhead: TxnOffsetCommit sent by SendOffsetsAhead reaches the
// coordinator while the transaction's (held) produce is still unanswered,
// and the transaction commits records and offsets. When the offset commit
// fails, Commit refuses to end the transaction (and SendOffsets refuses to
// send them again): nothing of it becomes visible.
func TestSendOffsetsAhead(t *testing.T) {
	for _, mode := range []string{"overlaps", "fails", "fails-then-sent-again"} {
		t.Run(mode, func(t *testing.T) {
			fail := mode != "overlaps"
			e := newFakeEnv(t)
			out, in := e.topic(1), e.topic(1)
			ctx := ctxT(t)
			p := e.producer("ahead", func(c *Config) { c.MaxInFlight = 5; c.RetryTimeout = time.Second })
			var (
				commits, during atomic.Int32
				answered        atomic.Bool // the produce was answered
			)
			e.cluster.ControlKey(int16(kmsg.TxnOffsetCommit), func(r kmsg.Request) (kmsg.Response, error, bool) {
				e.cluster.KeepControl()
				commits.Add(1)
				if !answered.Load() {
					during.Add(1)
				}
				if fail {
					req := r.(*kmsg.TxnOffsetCommitRequest)
					resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
					for _, rt := range req.Topics {
						st := kmsg.NewTxnOffsetCommitResponseTopic()
						st.Topic = rt.Topic
						for _, rp := range rt.Partitions {
							sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
							sp.Partition, sp.ErrorCode = rp.Partition, kerr.InvalidTxnState.Code
							st.Partitions = append(st.Partitions, sp)
						}
						resp.Topics = append(resp.Topics, st)
					}
					return resp, nil, true
				}
				return nil, nil, false
			})
			recs := e.heldProduce(ctx, p, out, "a", &answered)
			if err := p.SendOffsetsAhead(ctx, Group{ID: "ahead-group"}, []Offset{{Topic: in, Partition: 0, Offset: 9}}); err != nil {
				t.Fatal(err)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if mode == "fails-then-sent-again" {
				// The offsets sent once more, in order, must not hide the
				// failure: the transaction may be unusable.
				if err := p.SendOffsets(ctx, Group{ID: "ahead-group"}, []Offset{{Topic: in, Partition: 0, Offset: 9}}); err == nil {
					t.Fatal("SendOffsets after the offsets sent ahead failed: nil")
				}
			}
			if fail {
				if err := p.Commit(ctx); err == nil {
					t.Fatal("Commit ended a transaction whose offset commit failed")
				}
				if commits.Load() != 1 || during.Load() != 1 {
					t.Errorf("%d TxnOffsetCommit, %d of them before the produce was answered (want 1 and 1)", commits.Load(), during.Load())
				}
				if err := p.Abort(ctx); err != nil {
					t.Fatal(err)
				}
				if got := e.drain(out, 0, false); len(got) != 0 {
					t.Errorf("output holds %d records of the aborted transaction", len(got))
				}
				return
			}
			if err := p.OffsetsSent(); err != nil {
				t.Fatal(err)
			}
			if commits.Load() != 1 || during.Load() != 1 {
				t.Errorf("%d TxnOffsetCommit, %d of them before the produce was answered (want 1 and 1)", commits.Load(), during.Load())
			}
			if err := p.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got := keys(e.drain(out, 0, false)); !slices.Equal(got, recordKeys(recs)) {
				t.Errorf("output %v, want %v", got, recordKeys(recs))
			}
			if got := e.fetchOffsets("ahead-group", in, 0); got[0] != 9 {
				t.Errorf("committed offset %d, want 9", got[0])
			}
		})
	}
}

// heldProduce begins a transaction on p and produces 50 records (keys
// named after prefix) to out/0, the broker holding that produce 200ms
// before it answers and sets answered; it returns the records.
func (e *env) heldProduce(ctx context.Context, p *Producer, out, prefix string, answered *atomic.Bool) []Record {
	e.t.Helper()
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
	recs := makeRecords(prefix, 50)
	if err := p.Begin(); err != nil {
		e.t.Fatal(err)
	}
	if _, err := p.Produce(ctx, out, 0, recs); err != nil {
		e.t.Fatal(err)
	}
	return recs
}
