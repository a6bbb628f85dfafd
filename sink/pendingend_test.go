package sink

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPendingEndPolled: AddPartitionsToTxn and AddOffsetsToTxn refused
// with CONCURRENT_TRANSACTIONS (the previous transaction's markers are
// being written) are retried every PendingEndPoll, not after the
// exponential RetryBackoff, and the transaction commits its records and
// offsets; any other retriable code of the same calls still backs off
// exponentially.
func TestPendingEndPolled(t *testing.T) {
	const (
		refusals = 5
		backoff  = 300 * time.Millisecond // first exponential wait: 150-300 ms with jitter
	)
	// Exponentially, 5 refusals wait at least 150+250+250+250+250 ms
	// (each wait d/2..d, d doubling from 300 ms up to 500 ms).
	for _, tc := range []struct {
		name   string
		key    kmsg.Key
		code   *kerr.Error
		polled bool
	}{
		{"addpartitions/concurrent", kmsg.AddPartitionsToTxn, kerr.ConcurrentTransactions, true},
		{"addoffsets/concurrent", kmsg.AddOffsetsToTxn, kerr.ConcurrentTransactions, true},
		{"addpartitions/load-in-progress", kmsg.AddPartitionsToTxn, kerr.CoordinatorLoadInProgress, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFakeEnv(t)
			out, in := e.topic(1), e.topic(1)
			ctx := ctxT(t)
			p := e.producer("pending", func(c *Config) {
				c.RetryBackoff, c.MaxRetryBackoff, c.PendingEndPoll = backoff, 500*time.Millisecond, 5*time.Millisecond
			})
			h := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{tc.key}, Err: tc.code, Count: refusals})
			recs := makeRecords("p", 20)
			if err := p.Begin(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := p.Produce(ctx, out, 0, recs); err != nil {
				t.Fatal(err)
			}
			if err := p.SendOffsets(ctx, Group{ID: "pending-group"}, []Offset{{Topic: in, Partition: 0, Offset: 3}}); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if err := p.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if h.Hits() != refusals {
				t.Fatalf("%d refusals injected, want %d", h.Hits(), refusals)
			}
			// Generous for a loaded machine, and below the 1.95 s the
			// exponential waits take at least.
			if polled := took < time.Second; polled != tc.polled {
				t.Errorf("%d refusals of %v took %v: polled %v, want %v", refusals, tc.code, took, polled, tc.polled)
			}
			if got := keys(e.drain(out, 0, false)); !slices.Equal(got, recordKeys(recs)) {
				t.Errorf("output %v, want %v", got, recordKeys(recs))
			}
			if got := e.fetchOffsets("pending-group", in, 0); got[0] != 3 {
				t.Errorf("committed offset %d, want 3", got[0])
			}
		})
	}
}
