package harness

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/bench/workload"
)

// TestPacerReleasesAtTheRate: a pacer releases rate x elapsed records in
// total, a tick never more than the backlog, and a late tick catches up
// only up to the limit.
func TestPacerReleasesAtTheRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &pacer{rate: 1000, start: t0}
	steps := []struct {
		at          time.Duration
		limit, want int
	}{
		{0, 100, 0},
		{10 * time.Millisecond, 100, 10},
		{10 * time.Millisecond, 100, 0}, // same instant: nothing more is due
		{15 * time.Millisecond, 100, 5},
		{time.Second, 100, 100}, // late: capped at the limit
		{time.Second, 1000, 885},
		{2 * time.Second, 1000, 1000},
	}
	for i, s := range steps {
		if got := p.due(t0.Add(s.at), s.limit); got != s.want {
			t.Fatalf("step %d at %v: due %d, want %d", i, s.at, got, s.want)
		}
	}
	if p.sent != 2000 {
		t.Fatalf("sent %d after 2 s at 1000/s, want 2000", p.sent)
	}
}

// TestLatencyPercentiles: nearest-rank percentiles of 1..100 ms, in any
// order.
func TestLatencyPercentiles(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	l := latencyOf("x", d)
	for name, got := range map[string][2]float64{"p50": {l.P50, 51e3}, "p90": {l.P90, 91e3}, "p95": {l.P95, 96e3}, "p99": {l.P99, 100e3}, "max": {l.Max, 100e3}} {
		if got[0] != got[1] {
			t.Errorf("%s = %g us, want %g", name, got[0], got[1])
		}
	}
	if latencyOf("x", nil) != nil {
		t.Error("no samples must give no latency")
	}
}

// TestLatencyOnTheEmbeddedBroker runs the latency case briefly on kfake:
// the paced input reaches its rate, every key comes out once and the
// latencies are positive and ordered.
func TestLatencyOnTheEmbeddedBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and the job")
	}
	const n, rate = 6000, 3000
	c := LatencyCase{Rate: rate, E2E: E2ECase{Spec: workload.Spec{Seed: 3, KeysPerWindow: 4 * n, Window: 24 * time.Hour, DupRatio: 0.1, PayloadBytes: 50, Partitions: 2, Topics: 2},
		Records: n, Reps: 1, Replication: 1, Interval: 100 * time.Millisecond, MaxRecords: 50_000, Dir: t.TempDir()}}
	rs, err := RunLatency(context.Background(), c, quiet())
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if !r.Valid || r.Correct.Lost != 0 || r.Correct.Escaped != 0 {
		t.Fatalf("output: %v", r.Correct)
	}
	if r.Paced.AchievedRate < 0.9*rate || r.Paced.AchievedRate > 1.1*rate {
		t.Fatalf("achieved %.0f records/s, asked %d", r.Paced.AchievedRate, rate)
	}
	l := r.Latency
	if !(l.P50 > 0 && l.P50 <= l.P95 && l.P95 <= l.P99 && l.P99 <= l.Max) || r.Paced.BoundMs != 250 || r.Paced.Ack == nil || r.Paced.Ack.P50 > l.P50 {
		t.Fatalf("latency %+v, paced %+v", l, r.Paced)
	}
	// The stages: every output record was seen read_uncommitted no later
	// than read_committed, and the job's histograms counted its cycles.
	st := r.Paced.Stages
	if st == nil || st.Produced == nil || st.Committed == nil || st.Produced.P50 > l.P50 || st.Produced.P50 < r.Paced.Ack.P50/2 ||
		st.Job == nil || st.Job.Cycles == 0 || st.Job.CycleP50Ms <= 0 || st.Job.E2EP50Ms <= 0 {
		t.Fatalf("stages %+v (job %+v), latency %+v", st, st.Job, l)
	}
	ts := latencyTargets(Summarise(rs))
	if len(ts) != 1 || ts[0].Met != (r.Paced.P99OverBound <= 1) || !strings.Contains(ts[0].Measured, CaseLatencyEmbedded) {
		t.Fatalf("targets %+v for %+v", ts, r.Paced)
	}
	var md strings.Builder
	writeLatencyTable(&md, CaseLatencyEmbedded, rs)
	if !strings.Contains(md.String(), "| 0 | 100 ms | 6k | 3k |") || !strings.Contains(md.String(), "| job cycles |") {
		t.Fatalf("table:\n%s", md.String())
	}
}

// TestCumHistQuantile: the quantile of a merged cumulative histogram is the
// upper bound of the bucket holding the q-th sample.
func TestCumHistQuantile(t *testing.T) {
	h := cumHist{bounds: []float64{0.1, 0.25, 0.5, 1}, cum: []uint64{10, 60, 99, 100}, count: 100}
	for _, c := range []struct{ q, want float64 }{{0.05, 0.1}, {0.1, 0.1}, {0.11, 0.25}, {0.5, 0.25}, {0.99, 0.5}, {1, 1}} {
		if got := h.quantile(c.q); got != c.want {
			t.Errorf("q %g: %g, want %g", c.q, got, c.want)
		}
	}
	h.count = 101 // one sample above the last bound
	if got := h.quantile(1); !math.IsInf(got, 1) {
		t.Errorf("q 1 beyond the last bound: %g, want +Inf", got)
	}
	if got, want := h.quantileMs(1), -1.0; got != want {
		t.Errorf("q 1 beyond the last bound in ms: %g, want %g", got, want)
	}
	if got, want := h.quantileMs(0.5), 250.0; got != want {
		t.Errorf("q 0.5 in ms: %g, want %g", got, want)
	}
	if got := (cumHist{}).quantile(0.5); got != 0 {
		t.Errorf("empty: %g, want 0", got)
	}
}
