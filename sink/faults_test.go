package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// faultCase injects one broker misbehaviour with kfake's controls.
type faultCase struct {
	name string
	// install sets up the fault and returns a probe reporting how many
	// requests it hit, and an optional hook run after the producer reported
	// an error and before Abort (to let a delayed request land).
	install func(t *testing.T, c *kfake.Cluster) (hits func() int, afterError func())
	// atInit installs the fault before the producer's first Init instead of
	// before the second transaction.
	atInit bool
	// wantErr says the faulted transaction must fail at least once.
	wantErr bool
	// wantAmbiguous says every such failure must be ClassAmbiguous: a
	// request of unknown fate may have reached the log.
	wantAmbiguous bool
}

// controlFirst handles the first request of key with fn and lets every
// later one through.
func controlFirst(c *kfake.Cluster, key kmsg.Key, n *atomic.Int32, fn func(kmsg.Request) (kmsg.Response, error, bool)) {
	c.ControlKey(int16(key), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if n.Add(1) != 1 {
			return nil, nil, false
		}
		return fn(r)
	})
}

func faultOnce(key kmsg.Key, code *kerr.Error, count int) func(*testing.T, *kfake.Cluster) (func() int, func()) {
	return func(_ *testing.T, c *kfake.Cluster) (func() int, func()) {
		h := c.Fault(kfake.Fault{Keys: []kmsg.Key{key}, Err: code, Count: count})
		return h.Hits, nil
	}
}

func faultCases() []faultCase {
	return []faultCase{{
		// The request never reaches the log; the client times out and
		// resends the batch.
		name: "produce/request-lost",
		install: func(_ *testing.T, c *kfake.Cluster) (func() int, func()) {
			var n atomic.Int32
			controlFirst(c, kmsg.Produce, &n, func(kmsg.Request) (kmsg.Response, error, bool) { return nil, nil, true })
			return func() int { return int(n.Load()) }, nil
		},
	}, {
		name: "produce/connection-closed",
		install: func(_ *testing.T, c *kfake.Cluster) (func() int, func()) {
			var n atomic.Int32
			controlFirst(c, kmsg.Produce, &n, func(kmsg.Request) (kmsg.Response, error, bool) {
				return nil, errors.New("injected: close connection"), true
			})
			return func() int { return int(n.Load()) }, nil
		},
	}, {
		// The batch is appended after the client gave up and resent it:
		// one of the two copies is a duplicate.
		name: "produce/applied-late",
		install: func(t *testing.T, c *kfake.Cluster) (func() int, func()) {
			var n atomic.Int32
			late := make(chan struct{})
			controlFirst(c, kmsg.Produce, &n, func(kmsg.Request) (kmsg.Response, error, bool) {
				c.SleepControl(func() { time.Sleep(3 * faultRequestTimeout) })
				defer close(late)
				return nil, nil, false
			})
			// Hits counts only once the late copy has been handled.
			return func() int {
				select {
				case <-late:
				case <-time.After(5 * time.Second):
					t.Error("late produce never handled")
				}
				// The handler appends the late copy right after the control
				// returns, and kfake handles requests one at a time: once a
				// later request is answered, the copy is in the log.
				syncCluster(t, c)
				return int(n.Load())
			}, nil
		},
	}, {
		// Appended, but answered REQUEST_TIMED_OUT (a real broker does this
		// when replication times out).
		name:    "produce/timed-out-after-append",
		install: faultOnce(kmsg.Produce, kerr.RequestTimedOut, 1),
	}, {
		name:    "produce/not-leader",
		install: faultOnce(kmsg.Produce, kerr.NotLeaderForPartition, 2),
	}, {
		// Every produce is lost until the retry budget is spent: ambiguous.
		name:          "produce/lost-beyond-retries",
		wantErr:       true,
		wantAmbiguous: true,
		install: func(_ *testing.T, c *kfake.Cluster) (func() int, func()) {
			var n atomic.Int32
			var stop atomic.Bool
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				if stop.Load() {
					c.DropControl()
					return nil, nil, false
				}
				n.Add(1)
				c.KeepControl()
				return nil, nil, true
			})
			return func() int { return int(n.Load()) }, func() { stop.Store(true) }
		},
	}, {
		// EndTxn never reaches the coordinator: ambiguous; Abort settles it
		// as aborted and the cycle runs again.
		name:    "endtxn/request-lost",
		wantErr: true,
		install: func(_ *testing.T, c *kfake.Cluster) (func() int, func()) {
			var n atomic.Int32
			controlFirst(c, kmsg.EndTxn, &n, func(kmsg.Request) (kmsg.Response, error, bool) { return nil, nil, true })
			return func() int { return int(n.Load()) }, nil
		},
	}, {
		// EndTxn commits after the client gave up: ambiguous; recovery
		// finds the transaction committed and does not run it again.
		name:    "endtxn/applied-response-lost",
		wantErr: true,
		install: func(t *testing.T, c *kfake.Cluster) (func() int, func()) {
			var n atomic.Int32
			release := make(chan struct{})
			applied := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Observe: true, Count: -1})
			controlFirst(c, kmsg.EndTxn, &n, func(kmsg.Request) (kmsg.Response, error, bool) {
				c.SleepControl(func() { <-release })
				return nil, nil, false
			})
			return func() int { return int(n.Load()) }, func() {
				close(release)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := applied.Wait(ctx, 1); err != nil {
					t.Errorf("delayed EndTxn not processed: %v", err)
				}
			}
		},
	}, {
		name:    "endtxn/timed-out",
		wantErr: true,
		install: faultOnce(kmsg.EndTxn, kerr.RequestTimedOut, 1),
	}, {
		name:    "endtxn/concurrent-transactions",
		install: faultOnce(kmsg.EndTxn, kerr.ConcurrentTransactions, 3),
	}, {
		name:    "endtxn/not-coordinator",
		install: faultOnce(kmsg.EndTxn, kerr.NotCoordinator, 1),
	}, {
		name:    "addpartitions/concurrent-transactions",
		install: faultOnce(kmsg.AddPartitionsToTxn, kerr.ConcurrentTransactions, 2),
	}, {
		name:    "addoffsets/coordinator-load",
		install: faultOnce(kmsg.AddOffsetsToTxn, kerr.CoordinatorLoadInProgress, 2),
	}, {
		name:    "txnoffsetcommit/timed-out-after-store",
		install: faultOnce(kmsg.TxnOffsetCommit, kerr.RequestTimedOut, 1),
	}, {
		name:    "initproducerid/coordinator-not-available",
		atInit:  true,
		install: faultOnce(kmsg.InitProducerID, kerr.CoordinatorNotAvailable, 2),
	}}
}

const faultRequestTimeout = 300 * time.Millisecond

// (e) Under lost, late and failed requests every transaction ends committed
// exactly once or aborted (and is then run again, as the job would after
// recovery): the read_committed output holds each record exactly once.
//
// With five produce requests in flight each transaction takes several
// batches, so the faulted request has others in flight behind it.
func TestFaultsNeverDuplicate(t *testing.T) {
	for _, inFlight := range []int{1, 5} {
		for _, fc := range faultCases() {
			t.Run(fmt.Sprintf("in-flight-%d/%s", inFlight, fc.name), func(t *testing.T) {
				testFault(t, fc, inFlight)
			})
		}
	}
}

func testFault(t *testing.T, fc faultCase, inFlight int) {
	e := newFakeEnv(t)
	out, in := e.topic(1), e.topic(1)
	ctx := ctxT(t)
	cfg := e.config("faults")
	cfg.RequestTimeout = faultRequestTimeout
	cfg.RetryTimeout = 2 * time.Second
	n := 20
	if inFlight > 1 {
		cfg.MaxInFlight, cfg.MaxBatchBytes, n = inFlight, 1024, 200 // ~8 batches
	}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var hits func() int
	var afterError func()
	if fc.atInit {
		hits, afterError = fc.install(t, e.cluster)
	}
	if err := p.Init(ctx); err != nil {
		t.Fatal(err)
	}

	const txns = 3
	var failures int
	for i := range txns {
		if i == 1 && !fc.atInit {
			hits, afterError = fc.install(t, e.cluster)
		}
		prefix := fmt.Sprint("t", i)
		recs := makeRecords(prefix, n)
		for attempt := 1; ; attempt++ {
			err := oneCycle(ctx, p, out, in, recs, int64(i+1))
			if err == nil {
				break
			}
			failures++
			if c := ClassOf(err); c == ClassFenced || c == ClassFatal {
				t.Fatalf("txn %d: %v (class %v)", i, err, c)
			}
			var amb *AmbiguousError
			if fc.wantAmbiguous && !errors.As(err, &amb) {
				t.Fatalf("txn %d: %v (class %v), want a *AmbiguousError", i, err, ClassOf(err))
			}
			if afterError != nil {
				afterError()
				afterError = nil
			}
			if err := p.Abort(ctx); err != nil {
				t.Fatalf("abort after %v: %v", err, err)
			}
			// Recovery: the output topic says whether it committed.
			committed := 0
			for _, k := range keys(e.drain(out, 0, false)) {
				if strings.HasPrefix(k, prefix+"-") {
					committed++
				}
			}
			t.Logf("txn %d attempt %d: %v; recovery finds %d of %d records", i, attempt, err, committed, n)
			if committed == n {
				break
			}
			if committed != 0 {
				t.Fatalf("txn %d partly visible: %d of %d records", i, committed, n)
			}
			if attempt == 3 {
				t.Fatalf("txn %d failed %d times", i, attempt)
			}
		}
	}
	if hits == nil || hits() == 0 {
		t.Fatal("the fault never fired")
	}
	if fc.wantErr && failures == 0 {
		t.Fatal("the fault did not surface as an error")
	}
	if !fc.wantErr && failures != 0 {
		t.Fatalf("%d transactions failed; the fault should have been retried inside the call", failures)
	}
	var want []string
	for i := range txns {
		want = append(want, recordKeys(makeRecords(fmt.Sprint("t", i), n))...)
	}
	if got := keys(e.drain(out, 0, false)); !slices.Equal(got, want) {
		t.Fatalf("read_committed output (%d records) is not each record once (%d):\n got %v\nwant %v", len(got), len(want), got, want)
	}
	if failures == 0 {
		// Nothing aborted: not even the log holds a second copy.
		if got := keys(e.drain(out, 0, true)); !slices.Equal(got, want) {
			t.Fatalf("read_uncommitted output has %d records, want %d", len(got), len(want))
		}
	}
	if got := e.fetchOffsets("faults", in, 0); got[0] != txns {
		t.Fatalf("committed input offset %d, want %d", got[0], txns)
	}
}

// oneCycle runs one commit cycle: records to out/0, input offset of in/0.
func oneCycle(ctx context.Context, p *Producer, out, in string, recs []Record, inOffset int64) error {
	if err := p.Begin(); err != nil {
		return err
	}
	if _, err := p.Produce(ctx, out, 0, recs); err != nil {
		return err
	}
	if err := p.SendOffsets(ctx, Group{ID: "faults"}, []Offset{{Topic: in, Partition: 0, Offset: inOffset}}); err != nil {
		return err
	}
	return p.Commit(ctx)
}

// syncCluster returns once c answered a request sent now: every request
// it was handling before is done.
func syncCluster(t *testing.T, c *kfake.Cluster) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
		t.Fatalf("sync with the cluster: %v", err)
	}
}
