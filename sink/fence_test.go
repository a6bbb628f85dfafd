package sink

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestJudgeFence(t *testing.T) {
	const pid, epoch = 7, 3
	for _, tc := range []struct {
		name string
		st   *TxnState
		want FenceCause
	}{
		{"unknown", nil, FenceUndecided},
		{"timeout abort done", &TxnState{State: "CompleteAbort", ProducerID: pid, ProducerEpoch: epoch + 1}, FenceTimedOut},
		{"timeout abort running", &TxnState{State: "PrepareAbort", ProducerID: pid, ProducerEpoch: epoch + 1}, FenceTimedOut},
		{"epoch fence running", &TxnState{State: "PrepareEpochFence", ProducerID: pid, ProducerEpoch: epoch + 1}, FenceTimedOut},
		{"idle one up", &TxnState{State: "Empty", ProducerID: pid, ProducerEpoch: epoch + 1}, FenceUndecided},
		{"other's transaction", &TxnState{State: "Ongoing", ProducerID: pid, ProducerEpoch: epoch + 1}, FenceTakenOver},
		{"other's commit", &TxnState{State: "CompleteCommit", ProducerID: pid, ProducerEpoch: epoch + 1}, FenceTakenOver},
		{"two bumps", &TxnState{State: "CompleteAbort", ProducerID: pid, ProducerEpoch: epoch + 2}, FenceTakenOver},
		{"new producer id", &TxnState{State: "Empty", ProducerID: pid + 1, ProducerEpoch: 0}, FenceTakenOver},
		{"not bumped", &TxnState{State: "Ongoing", ProducerID: pid, ProducerEpoch: epoch}, FenceUndecided},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeFence(pid, epoch, tc.st); got != tc.want {
				t.Fatalf("judgeFence(%+v) = %v, want %v", tc.st, got, tc.want)
			}
		})
	}
}

// waitEpochAbove waits until the coordinator, asked by the independent
// client, shows txnID at an epoch above epoch: the timeout abort happened.
func (e *env) waitEpochAbove(txnID string, epoch int16, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{txnID}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		shards := e.admin.RequestSharded(ctx, req)
		cancel()
		for _, sh := range shards {
			if sh.Err != nil {
				continue
			}
			for _, st := range sh.Resp.(*kmsg.DescribeTransactionsResponse).TransactionStates {
				if st.ErrorCode == 0 && st.ProducerEpoch > epoch {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: the coordinator did not abort the transaction of epoch %d within %v", txnID, epoch, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestFenceCause produces into a transaction, lets something bump the epoch,
// and checks the cause the producer reports, then that taking the id back
// after a timeout leaves exactly the new transaction's records visible.
func TestFenceCause(t *testing.T) {
	e := newEnv(t)
	external := kafkatest.External() != nil
	topic := e.topic(1)
	const timeout = 3 * time.Second
	short := func(c *Config) { c.TransactionTimeout = timeout }

	open := func(t *testing.T, p *Producer, prefix string) {
		t.Helper()
		if err := p.Begin(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Produce(ctxT(t), topic, 0, makeRecords(prefix, 3)); err != nil {
			t.Fatal(err)
		}
	}
	fenced := func(t *testing.T, p *Producer) *FencedError {
		t.Helper()
		err := p.Commit(ctxT(t))
		var fe *FencedError
		if !errors.Is(err, ErrFenced) || !errors.As(err, &fe) {
			t.Fatalf("commit after the epoch was bumped: %v, want a *FencedError", err)
		}
		t.Logf("%v", fe)
		return fe
	}

	t.Run("taken over", func(t *testing.T) {
		// The default timeout (30s): taking the id over from an open
		// transaction takes seconds on a real cluster.
		id := kafkatest.TopicName("fence-taken")
		a := e.producer(id)
		open(t, a, "a-")
		e.producer(id) // a second instance
		fe := fenced(t, a)
		if fe.Cause != FenceTakenOver || fe.OpenFor <= 0 || fe.OpenFor >= fe.Timeout || fe.Txn != nil {
			t.Fatalf("cause %v, open %v, described %v: want taken over, decided without asking", fe.Cause, fe.OpenFor, fe.Txn)
		}
	})

	t.Run("timed out", func(t *testing.T) {
		id := kafkatest.TopicName("fence-timeout")
		a := e.producer(id, short)
		open(t, a, "lost-")
		_, epoch := a.ProducerID()
		e.waitEpochAbove(id, epoch, timeout+20*time.Second)
		fe := fenced(t, a)
		want := FenceTimedOut
		if !external {
			// kfake reports an aborted transactional id as Empty, which
			// a takeover from idle leaves too.
			want = FenceUndecided
		}
		if fe.Cause != want || fe.OpenFor < timeout || fe.Txn == nil {
			t.Fatalf("cause %v, open %v, described %+v: want %v after the timeout, with the coordinator's state", fe.Cause, fe.OpenFor, fe.Txn, want)
		}
		// Take the id back and go on: only the new transaction is visible.
		if err := a.Init(ctxT(t)); err != nil {
			t.Fatalf("init after the timeout abort: %v", err)
		}
		open(t, a, "kept-")
		if err := a.Commit(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		got := keys(e.drain(topic, 0, false))
		var mine []string
		for _, k := range got {
			if len(k) > 5 && (k[:5] == "lost-" || k[:5] == "kept-") {
				mine = append(mine, k)
			}
		}
		if want := recordKeys(makeRecords("kept-", 3)); !slices.Equal(mine, want) {
			t.Fatalf("read_committed sees %v, want %v", mine, want)
		}
	})

	t.Run("timed out, then taken over", func(t *testing.T) {
		id := kafkatest.TopicName("fence-both")
		a := e.producer(id, short)
		open(t, a, "late-")
		_, epoch := a.ProducerID()
		e.waitEpochAbove(id, epoch, timeout+20*time.Second)
		e.producer(id, short)
		fe := fenced(t, a)
		if fe.Cause != FenceTakenOver || fe.Txn == nil || fe.Txn.ProducerEpoch < epoch+2 {
			t.Fatalf("cause %v, described %+v: want taken over, seen from an epoch two above %d", fe.Cause, fe.Txn, epoch)
		}
	})
}
