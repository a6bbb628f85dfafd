package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
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
// late, cut off or refused. On the producer's own connection ("pipe") the
// requests behind it were written before it was answered; through
// kafka-go's Transport ("transport") they go on other connections and
// reach the broker first, refused as out of sequence. Either way the
// producer must resend the lost one and every later one, in order, inside
// the call. An independent reader (kgo) must see every record exactly once
// and in produce order, read_committed and read_uncommitted alike (the
// broker stored no second copy), and the fault must have had later
// requests in flight behind it.
func TestWindowNeverReordersOrDuplicates(t *testing.T) {
	for _, conn := range []string{"pipe", "transport"} {
		for _, tc := range windowFaults() {
			t.Run(conn+"/"+tc.name, func(t *testing.T) { testWindow(t, conn, tc.fault) })
		}
	}
}

// windowFault handles the faulted request, holding it with h first.
type windowFault func(c *kfake.Cluster, h *hold) (kmsg.Response, error, bool)

func windowFaults() []struct {
	name  string
	fault windowFault
} {
	return []struct {
		name  string
		fault windowFault
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
	}}
}

func testWindow(t *testing.T, conn string, fault windowFault) {
	e := newFakeEnv(t)
	out, in := e.topic(1), e.topic(1)
	ctx := ctxT(t)
	cfg := e.config("window")
	cfg.RequestTimeout = faultRequestTimeout
	cfg.RetryTimeout = 5 * time.Second
	cfg.MaxBatchBytes = 1024 // ~25 records a batch
	cfg.MaxInFlight = 5
	var wc writeCounter
	if conn == "pipe" {
		cfg.Dialer.Dial = wc.dial
	} else {
		cfg.Dialer = nil
	}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.Init(ctx); err != nil {
		t.Fatal(err)
	}

	var (
		seen           atomic.Int32
		faulted, fired atomic.Bool
		w0             atomic.Int64 // writes on the produce connections before the faulted transaction
		ahead          atomic.Int64 // pipe: requests written behind the faulted one before its answer
		h              hold
	)
	var (
		mu      sync.Mutex
		sent    = map[[2]int64]bool{} // epoch, base sequence of each batch received
		resends int                   // batches received again outside the faulted transaction
	)
	e.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if r.(*kmsg.ProduceRequest).TransactionID == nil {
			return nil, nil, false
		}
		if !faulted.Load() {
			mu.Lock()
			for _, tp := range r.(*kmsg.ProduceRequest).Topics {
				for _, pp := range tp.Partitions {
					if b := pp.Records; len(b) >= 57 {
						k := [2]int64{int64(binary.BigEndian.Uint16(b[51:53])), int64(binary.BigEndian.Uint32(b[53:57]))}
						if sent[k] {
							resends++
						}
						sent[k] = true
					}
				}
			}
			mu.Unlock()
			return nil, nil, false
		}
		if h.holding.Load() {
			h.behind.Add(1)
		}
		if seen.Add(1) != 2 {
			return nil, nil, false
		}
		fired.Store(true)
		if conn == "pipe" {
			// The broker reads a connection's requests one at a time, so
			// none arrives while this one is held: the window shows as
			// requests written behind it before it is answered (one
			// write per request of 1 KiB). A producer that waits for
			// each answer never writes the third.
			deadline := time.Now().Add(5 * time.Second)
			for wc.writes.Load()-w0.Load() < 3 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			ahead.Store(wc.writes.Load() - w0.Load() - 2)
		}
		return fault(e.cluster, &h)
	})
	const txns, n = 3, 300
	var want []string
	for i := range txns {
		w0.Store(wc.writes.Load())
		faulted.Store(i == 1)
		recs := makeRecords(fmt.Sprint("t", i), n)
		want = append(want, recordKeys(recs)...)
		if err := oneCycle(ctx, p, out, in, recs, int64(i+1)); err != nil {
			t.Fatalf("txn %d: %v (class %v); the window should have been resent inside the call", i, err, ClassOf(err))
		}
	}
	behind := int64(h.behind.Load()) // transport: arrived while it was held
	if conn == "pipe" {
		behind = ahead.Load()
	}
	if !fired.Load() || behind <= 0 {
		t.Fatalf("fault fired %v with %d requests sent behind it: the window was not used", fired.Load(), behind)
	}
	t.Logf("%d produce requests of the faulted transaction, %d sent behind the faulted one before it was answered; %d batches resent in the others", seen.Load(), behind, resends)
	if conn == "pipe" && resends != 0 {
		// On one connection the batches arrive in sequence order: without
		// a fault none is refused out of sequence and resent.
		t.Errorf("%d batches of the unfaulted transactions reached the broker twice: the connection reorders requests", resends)
	}
	if got := keys(e.drain(out, 0, false)); !slices.Equal(got, want) {
		t.Fatalf("read_committed output is not each record once in order (%d records, want %d):\n%s", len(got), len(want), firstDiff(got, want))
	}
	if got := keys(e.drain(out, 0, true)); !slices.Equal(got, want) {
		t.Fatalf("read_uncommitted output is not each record once in order (%d records, want %d):\n%s", len(got), len(want), firstDiff(got, want))
	}
}

// writeCounter dials connections that count their writes.
type writeCounter struct{ writes atomic.Int64 }

func (w *writeCounter) dial(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, n: &w.writes}, nil
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
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
