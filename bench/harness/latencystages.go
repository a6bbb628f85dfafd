package harness

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Stages splits a latency run's end-to-end time into what each side of
// the job added, from probes independent of the code under test (a
// read_uncommitted franz-go reader beside the read_committed one) and from
// the job's own histograms:
//
//	stamp ─Ack─▶ input acknowledged (acks=all)
//	stamp ─Produced─▶ output record readable read_uncommitted: the job
//	                  fetched, decided and produced it, and the followers
//	                  replicated it (the high watermark passed it)
//	uncommitted ─Committed─▶ the same record readable read_committed: the
//	                  rest of its cycle, AddOffsetsToTxn, TxnOffsetCommit,
//	                  EndTxn, the markers and the last stable offset
//
// Produced minus Ack is the job's share before its commit (with the
// output's replication); Committed is the commit's share.
type Stages struct {
	Produced  *Latency `json:"produced"`  // stamp to read_uncommitted read, per output record
	Committed *Latency `json:"committed"` // read_uncommitted read to read_committed read of the same record
	// Job is the job's own view: its cycle histogram
	// (dedupstream_cycle_duration_seconds: first fetched batch to state
	// commit) and its end-to-end histogram (record timestamp to state
	// commit), merged over partitions; percentiles are bucket upper
	// bounds.
	Job *JobTimes `json:"job,omitempty"`
}

// JobTimes is a summary of the job's latency histograms. A percentile
// beyond the histogram's last bound (records stamped long before they were
// produced, as the e2e cases' workload timestamps are) is -1.
type JobTimes struct {
	Cycles      uint64  `json:"cycles"`        // committed cycles that read records
	CycleMeanMs float64 `json:"cycle_mean_ms"` // mean cycle, first batch to state commit
	CycleP50Ms  float64 `json:"cycle_p50_ms"`
	CycleP99Ms  float64 `json:"cycle_p99_ms"`
	E2EP50Ms    float64 `json:"e2e_p50_ms"` // record timestamp to state commit
	E2EP99Ms    float64 `json:"e2e_p99_ms"`
}

// jobTimes reads the job's cycle and end-to-end histograms from its
// collector; nil when the job published none.
func jobTimes(c prometheus.Collector) *JobTimes {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return nil
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil
	}
	var jt JobTimes
	found := false
	for _, mf := range mfs {
		switch mf.GetName() {
		case "dedupstream_cycle_duration_seconds":
			h := mergeHist(mf.GetMetric())
			jt.Cycles = h.count
			if h.count > 0 {
				jt.CycleMeanMs = h.sum / float64(h.count) * 1e3
			}
			jt.CycleP50Ms, jt.CycleP99Ms = h.quantileMs(0.5), h.quantileMs(0.99)
			found = true
		case "dedupstream_end_to_end_latency_seconds":
			h := mergeHist(mf.GetMetric())
			jt.E2EP50Ms, jt.E2EP99Ms = h.quantileMs(0.5), h.quantileMs(0.99)
			found = true
		}
	}
	if !found {
		return nil
	}
	return &jt
}

// cumHist is a cumulative histogram merged over label sets.
type cumHist struct {
	bounds []float64
	cum    []uint64
	count  uint64
	sum    float64
}

func mergeHist(ms []*dto.Metric) cumHist {
	var h cumHist
	for _, m := range ms {
		ph := m.GetHistogram()
		if ph == nil {
			continue
		}
		h.count += ph.GetSampleCount()
		h.sum += ph.GetSampleSum()
		for i, b := range ph.GetBucket() {
			if i == len(h.bounds) {
				h.bounds = append(h.bounds, b.GetUpperBound())
				h.cum = append(h.cum, 0)
			}
			h.cum[i] += b.GetCumulativeCount()
		}
	}
	return h
}

// quantile is the upper bound of the first bucket holding the q-th
// sample; +Inf when it lies beyond the last bound, 0 without samples.
func (h cumHist) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(h.count)))
	for i, c := range h.cum {
		if c >= want {
			return h.bounds[i]
		}
	}
	return math.Inf(1)
}

// quantileMs is quantile in milliseconds, -1 for +Inf (JSON has no
// infinity: the child's stats line would not encode).
func (h cumHist) quantileMs(q float64) float64 {
	v := h.quantile(q)
	if math.IsInf(v, 1) {
		return -1
	}
	return v * 1e3
}

// stageProbe reads the output read_uncommitted and notes when each
// record (partition, offset) became readable, for the read_committed
// reader to pair with.
type stageProbe struct {
	mu       sync.Mutex
	seen     map[int64]time.Time // partition<<48 | offset -> read time
	produced []time.Duration
	paired   []time.Duration
}

func probeKey(r *kgo.Record) int64 { return int64(r.Partition)<<48 | r.Offset }

// run reads until ctx ends.
func (sp *stageProbe) run(ctx context.Context, cl *kgo.Client) {
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		now := time.Now()
		if fs.NumRecords() == 0 {
			continue
		}
		sp.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			sp.seen[probeKey(r)] = now
			sp.produced = append(sp.produced, now.Sub(r.Timestamp))
		})
		sp.mu.Unlock()
	}
}

// committed pairs records read read_committed at now with their
// read_uncommitted read; a record the probe has not seen yet (its fetch
// answered later) counts 0.
func (sp *stageProbe) committed(now time.Time, recs []*kgo.Record) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for _, r := range recs {
		k := probeKey(r)
		var d time.Duration
		if at, ok := sp.seen[k]; ok {
			d = max(now.Sub(at), 0)
			delete(sp.seen, k)
		}
		sp.paired = append(sp.paired, d)
	}
}

func (sp *stageProbe) stages() *Stages {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return &Stages{
		Produced:  latencyOf("output record: produce stamp to read_uncommitted read", sp.produced),
		Committed: latencyOf("output record: read_uncommitted read to read_committed read", sp.paired),
	}
}
