package chaos

import (
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/segmentio/kafka-go"
)

// TestLostResponses runs the job in this process behind one Proxy per
// broker that loses a seeded share of Produce and EndTxn responses: the
// broker applied the request, the job never hears so. Half the losses
// close the connection, half stall it until the job's request timeout.
// Each loss is an ambiguous outcome the job must resolve by recovery.
//
// Five produce requests are in flight, in batches of 8 KiB (several per
// cycle), on the job's own produce connection to each broker, so Produce
// responses are lost with more requests out behind them on the same
// connection; the run must have lost at least one so.
func TestLostResponses(t *testing.T) {
	r := begin(t)
	r.produce = "{batch_max_bytes: 8KiB, max_in_flight: 5}"
	perMille := r.n(100, 50)
	w := r.workload(r.n(6_000, 20_000))
	prod := r.producer()
	var armed atomic.Bool
	names := map[int16]string{apiProduce: "Produce", apiEndTxn: "EndTxn"}
	var seen [2]atomic.Int64 // Produce, EndTxn responses seen while armed
	ps, err := StartProxies(r.brokers, func(key int16) Loss {
		if !armed.Load() || (key != apiProduce && key != apiEndTxn) {
			return Deliver
		}
		// The third response of each kind is always lost, so that a short
		// run exercises both; the others at the seeded rate.
		if n := seen[min(key, 1)].Add(1); n != 3 && r.intn(1000) >= perMille {
			return Deliver
		}
		loss := LoseAndClose
		if r.intn(2) == 1 {
			loss = LoseAndStall
		}
		r.event("lose a %s response (%s)", names[key], map[Loss]string{LoseAndClose: "close", LoseAndStall: "stall"}[loss])
		return loss
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	r.event("proxies in front of %d brokers lose %d per mille of Produce and EndTxn responses", len(ps), perMille)

	j := r.startJob(func(o *job.Options) {
		o.Transport = &kafka.Transport{ClientID: "chaos-lost", DialTimeout: 2 * time.Second,
			Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				to, err := ps.Route(addr)
				if err != nil {
					return nil, err
				}
				var d net.Dialer
				return d.DialContext(ctx, network, to)
			}}
		t.Cleanup(o.Transport.CloseIdleConnections)
		o.RequestTimeout = 2 * time.Second
	})
	armed.Store(true)
	ctx := r.ctx(20 * time.Minute)
	for part := range slices.Chunk(w.Records, 500) {
		if err := prod.Produce(ctx, part); err != nil {
			t.Fatal(err)
		}
		time.Sleep(40 * time.Millisecond)
	}
	r.waitCaught(prod, j.done, 5*time.Minute)
	armed.Store(false)
	r.finish(j)
	st := j.job.Stats()
	lost := ps.Lost()
	r.event("lost %d Produce and %d EndTxn responses; job: %d recoveries, %d cycles", lost[apiProduce], lost[apiEndTxn], st.Recoveries, st.Cycles)
	behind := ps.LostBehind()
	r.event("%d of the lost Produce responses had more Produce requests out behind them on their connection", behind[apiProduce])
	if behind[apiProduce] == 0 {
		t.Errorf("no Produce response was lost with more produce requests out on its connection: the window was not exercised")
	}
	if lost[apiProduce] == 0 || lost[apiEndTxn] == 0 {
		t.Errorf("the run lost %d Produce and %d EndTxn responses; both kinds must be exercised", lost[apiProduce], lost[apiEndTxn])
	}
	// A lost EndTxn response leaves the commit's outcome unknown: the
	// job settles it by recovery, or, when it was the last cycle's, on
	// the way out (counted with the ambiguous commits, not as a recovery).
	if amb := ambiguousCommits(t, j.job); st.Recoveries <= parts && amb == 0 {
		t.Errorf("lost responses caused no recovery and no ambiguous commit: %d recoveries for %d partitions", st.Recoveries, parts)
	}
	r.verify(w, &st)
}

// ambiguousCommits sums dedupstream_ambiguous_commits_total over
// partitions and outcomes, gathered through the job's collector.
func ambiguousCommits(t *testing.T, j *job.Job) float64 {
	t.Helper()
	families, err := jobtest.Gather(j)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == "dedupstream_ambiguous_commits_total" {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
