package sink

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestWindowNeverReordersOrDuplicates sends transactions of a dozen
// batches with five produce requests in flight while one request of the
// window (the second of the second transaction) is lost, answered too
// late, cut off or refused. The requests behind it reach the broker first
// and are refused as out of sequence; the producer must resend the lost
// one and every later one, in order, inside the call. An independent
// reader (kgo) must see every record exactly once and in produce order,
// read_committed and read_uncommitted alike (the broker stored no second
// copy), and the fault must have had later requests in flight behind it.
func TestWindowNeverReordersOrDuplicates(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fault handles the faulted request, holding it with h first.
		fault func(c *kfake.Cluster, h *hold) (kmsg.Response, error, bool)
	}{{
		name: "response-lost-after-append", // applied after the client's timeout
		fault: func(c *kfake.Cluster, h *hold) (kmsg.Response, error, bool) {
			h.sleep(c, 3*faultRequestTimeout)
			return nil, nil, false
		},
	}, {
		name: "request-lost",
		fault: func(c *kfake.Cluster, h *hold) (kmsg.Response, error, bool) {
			h.sleep(c, faultRequestTimeout/2)
			return nil, nil, true
		},
	}, {
		name: "connection-closed",
		fault: func(c *kfake.Cluster, h *hold) (kmsg.Response, error, bool) {
			h.sleep(c, faultRequestTimeout/2)
			return nil, errors.New("injected: close connection"), true
		},
	}, {
		name: "not-leader",
		fault: func(c *kfake.Cluster, h *hold) (kmsg.Response, error, bool) {
			h.sleep(c, faultRequestTimeout/2)
			return nil, kerr.NotLeaderForPartition, false
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFakeEnv(t)
			out, in := e.topic(1), e.topic(1)
			ctx := ctxT(t)
			cfg := e.config("window")
			cfg.RequestTimeout = faultRequestTimeout
			cfg.RetryTimeout = 5 * time.Second
			cfg.MaxBatchBytes = 1024 // ~25 records a batch
			cfg.MaxInFlight = 5
			p, err := NewProducer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Init(ctx); err != nil {
				t.Fatal(err)
			}

			var (
				seen           atomic.Int32
				faulted, fired atomic.Bool
				h              hold
			)
			e.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
				e.cluster.KeepControl()
				if r.(*kmsg.ProduceRequest).TransactionID == nil || !faulted.Load() {
					return nil, nil, false
				}
				if h.holding.Load() {
					h.behind.Add(1)
				}
				if seen.Add(1) == 2 {
					fired.Store(true)
					return tc.fault(e.cluster, &h)
				}
				return nil, nil, false
			})
			const txns, n = 3, 300
			var want []string
			for i := range txns {
				faulted.Store(i == 1)
				recs := makeRecords(fmt.Sprint("t", i), n)
				want = append(want, recordKeys(recs)...)
				if err := oneCycle(ctx, p, out, in, recs, int64(i+1)); err != nil {
					t.Fatalf("txn %d: %v (class %v); the window should have been resent inside the call", i, err, ClassOf(err))
				}
			}
			if !fired.Load() || h.behind.Load() == 0 {
				t.Fatalf("fault fired %v with %d requests arriving behind it: the window was not used", fired.Load(), h.behind.Load())
			}
			t.Logf("%d produce requests of the faulted transaction, %d arrived while the faulted one was held", seen.Load(), h.behind.Load())
			if got := keys(e.drain(out, 0, false)); !slices.Equal(got, want) {
				t.Fatalf("read_committed output is not each record once in order (%d records, want %d):\n%s", len(got), len(want), firstDiff(got, want))
			}
			if got := keys(e.drain(out, 0, true)); !slices.Equal(got, want) {
				t.Fatalf("read_uncommitted output is not each record once in order (%d records, want %d):\n%s", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// hold holds a controlled request while counting the produce requests
// that arrive meanwhile (kfake handles them while the held one sleeps).
type hold struct {
	holding atomic.Bool
	behind  atomic.Int32
}

func (h *hold) sleep(c *kfake.Cluster, d time.Duration) {
	h.holding.Store(true)
	c.SleepControl(func() { time.Sleep(d) })
	h.holding.Store(false)
}

// firstDiff describes where got departs from want.
func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d: got %q, want %q (got %v ...)", i, got[i], want[i], got[i:min(i+5, len(got))])
		}
	}
	return fmt.Sprintf("one is a prefix of the other: %d vs %d records", len(got), len(want))
}
