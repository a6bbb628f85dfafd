package job

import (
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/internal/progress"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector of the job's metrics. Register
// it once per job with the registry the caller serves.
//
// Counters count committed cycles only, so they agree with what
// read_committed readers see. Most metrics carry the stage's partition as
// label "partition"; the runners publish them once per fetched batch (lag)
// or committed cycle (everything else), from counters they keep locally, and
// the collector reads them at scrape time, so the per-record path pays
// nothing. A partition keeps its series after it is no longer run by this
// instance; its gauges then hold their last values.
func (j *Job) Collector() prometheus.Collector { return (*collector)(j) }

type collector Job

// Histogram buckets, in seconds.
var (
	cycleBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	e2eBuckets   = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
)

// stateEvery is how often a runner refreshes the state metrics (Bloom fill,
// store bytes per generation, disk usage): the Bloom statistics cost a pass
// over the filter's memory, about 1 ms per 10 MB.
var stateEvery = 10 * time.Second

var (
	lp  = []string{"partition"}
	lpr = []string{"partition", "reason"}
	lpa = []string{"partition", "age"}

	descIn          = prometheus.NewDesc("dedupstream_records_in_total", "Input records decided in committed cycles.", lp, nil)
	descOut         = prometheus.NewDesc("dedupstream_records_out_total", "Records written to the output topic in committed cycles.", lp, nil)
	descDropped     = prometheus.NewDesc("dedupstream_duplicates_dropped_total", "Duplicates dropped in committed cycles, by reason: batch (repeat inside the commit cycle), history (repeat of an earlier cycle).", lpr, nil)
	descDLQ         = prometheus.NewDesc("dedupstream_dlq_records_total", "Records written to the DLQ topic in committed cycles.", lp, nil)
	descRatio       = prometheus.NewDesc("dedupstream_duplicate_ratio", "Duplicates dropped divided by records in, over the committed cycles since this instance started; alert on the rate of the counters instead.", lp, nil)
	descBloomCheck  = prometheus.NewDesc("dedupstream_bloom_checks_total", "Keys tested against the Bloom front (keys not already emitted in the open cycle).", lp, nil)
	descBloomNeg    = prometheus.NewDesc("dedupstream_bloom_negatives_total", "Keys the Bloom front found definitely new (no store read).", lp, nil)
	descFP          = prometheus.NewDesc("dedupstream_bloom_false_positives_total", "Bloom front maybes the exact store did not confirm: false positives.", lp, nil)
	descStoreRead   = prometheus.NewDesc("dedupstream_store_reads_total", "Exact store lookups after a Bloom front maybe.", lp, nil)
	descStoreWrite  = prometheus.NewDesc("dedupstream_store_writes_total", "Keys written to the exact store: emitted records of committed cycles and output records restored in recovery.", lp, nil)
	descTxn         = prometheus.NewDesc("dedupstream_transactions_total", "Committed Kafka transactions (commit cycles).", lp, nil)
	descRestored    = prometheus.NewDesc("dedupstream_restored_records_total", "Output records read back into a lagging state store in recovery.", lp, nil)
	descMisroute    = prometheus.NewDesc("dedupstream_misrouted_records_total", "Input records found on another partition than the configured partitioner gives for their key.", lp, nil)
	descCycle       = prometheus.NewDesc("dedupstream_cycle_duration_seconds", "Processing latency: from the first fetched batch of a commit cycle to the state commit after its transaction committed; every record of the cycle waited at most this long inside the job.", lp, nil)
	descE2E         = prometheus.NewDesc("dedupstream_end_to_end_latency_seconds", "Per input record of a committed cycle: commit time minus the record timestamp (create time, or the broker's append time on LogAppendTime topics; records without a timestamp are left out); replays of old records land in the top buckets.", lp, nil)
	descLag         = prometheus.NewDesc("dedupstream_consumer_lag_records", "Last stable offset of the raw partition (from the latest fetch response) minus the committed input offset.", []string{"topic", "partition"}, nil)
	descStateKeys   = prometheus.NewDesc("dedupstream_state_keys", "Keys added to each live generation (age 0 is the current one), from the Bloom front's counts; keys of aborted cycles count too.", lpa, nil)
	descStateBytes  = prometheus.NewDesc("dedupstream_state_bytes", "Estimated on-disk bytes of each live generation's store bucket (keys still in the memtable count 0).", lpa, nil)
	descDisk        = prometheus.NewDesc("dedupstream_state_disk_bytes", "Bytes the partition's Pebble store occupies on disk.", lp, nil)
	descGen         = prometheus.NewDesc("dedupstream_window_generation", "The stage's current window generation number.", lp, nil)
	descFill        = prometheus.NewDesc("dedupstream_bloom_fill_ratio", "Fraction of bits set in each live generation's Bloom sub-filter.", lpa, nil)
	descFPR         = prometheus.NewDesc("dedupstream_bloom_estimated_false_positive_rate", "Probability, estimated from the bits set, that the Bloom front reports an absent key as maybe present.", lp, nil)
	descRestoreLeft = prometheus.NewDesc("dedupstream_restore_remaining_records", "Output offsets still to read back in the running restore; 0 when none runs.", lp, nil)
	descRestoreDone = prometheus.NewDesc("dedupstream_restore_progress_ratio", "Progress of the latest restore from the output, 0 to 1 (1 when done or when none was needed).", lp, nil)
	descRecovery    = prometheus.NewDesc("dedupstream_recoveries_total", "Runs of the recovery protocol, start-up included, over all partitions.", nil, nil)
	descReady       = prometheus.NewDesc("dedupstream_ready_stages", "Stages that completed recovery and process input.", nil, nil)
	descAssigned    = prometheus.NewDesc("dedupstream_assigned_partitions", "Partitions this instance owns now (group mode: in the current generation, 0 between generations).", nil, nil)
	descGenerations = prometheus.NewDesc("dedupstream_group_generations_total", "Consumer group generations this instance joined (group mode): one per rebalance it took part in.", nil, nil)
	descRouteIn     = prometheus.NewDesc("dedupstream_route_records_in_total", "Raw records the route step of repartition mode read in committed cycles.", nil, nil)
	descRouted      = prometheus.NewDesc("dedupstream_route_records_out_total", "Raw records the route step wrote to the repartition topic in committed cycles (the others went to the DLQ).", nil, nil)
	descBuild       = prometheus.NewDesc("dedupstream_build_info", "Always 1; labels name the build.", []string{"version", "goversion", "revision"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIn, descOut, descDropped, descDLQ, descRatio, descBloomCheck, descBloomNeg, descFP,
		descStoreRead, descStoreWrite, descTxn, descRestored, descMisroute, descCycle, descE2E, descLag, descStateKeys,
		descStateBytes, descDisk, descGen, descFill, descFPR, descRestoreLeft, descRestoreDone, descRecovery, descReady,
		descAssigned, descGenerations, descRouteIn, descRouted} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	j := (*Job)(c)
	s := j.Stats()
	ch <- prometheus.MustNewConstMetric(descRecovery, prometheus.CounterValue, float64(s.Recoveries))
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, float64(s.Ready))
	ch <- prometheus.MustNewConstMetric(descAssigned, prometheus.GaugeValue, float64(s.Assigned))
	ch <- prometheus.MustNewConstMetric(descGenerations, prometheus.CounterValue, float64(s.Generations))
	ch <- prometheus.MustNewConstMetric(descRouteIn, prometheus.CounterValue, float64(s.RouteIn))
	ch <- prometheus.MustNewConstMetric(descRouted, prometheus.CounterValue, float64(s.Routed))
	j.mu.Lock()
	parts := make([]*partMetrics, 0, len(j.parts))
	for _, pm := range j.parts {
		parts = append(parts, pm)
	}
	j.mu.Unlock()
	slices.SortFunc(parts, func(a, b *partMetrics) int { return a.p - b.p })
	for _, pm := range parts {
		pm.collect(ch, j.topics)
	}
}

// partMetrics are one partition's metrics. The Job keeps them across runs
// of the partition's runner so that counters stay monotonic.
type partMetrics struct {
	p     int
	label string
	lag   []atomic.Int64 // per raw topic, as Job.topics; -1 unknown

	mu          sync.Mutex
	counts      pipeline.Counts
	misrouted   uint64
	cycles      uint64
	restored    uint64
	storeWrites uint64
	cycle, e2e  hist
	restoreLeft int64
	restoreFrac float64
	state       stateStats
}

// stateStats is the latest refresh of the state metrics.
type stateStats struct {
	valid      bool
	generation uint64
	disk       uint64
	fpr        float64
	keys       []uint64 // by age
	bytes      []uint64
	fill       []float64
}

// partition returns partition p's metrics, creating them on first use.
func (j *Job) partition(p int) *partMetrics {
	j.mu.Lock()
	defer j.mu.Unlock()
	if pm := j.parts[p]; pm != nil {
		return pm
	}
	if j.parts == nil {
		j.parts = map[int]*partMetrics{}
	}
	pm := &partMetrics{
		p:           p,
		label:       strconv.Itoa(p),
		lag:         make([]atomic.Int64, len(j.topics)),
		cycle:       newHist(cycleBuckets),
		e2e:         newHist(e2eBuckets),
		restoreFrac: 1,
	}
	for i := range pm.lag {
		pm.lag[i].Store(-1)
	}
	j.parts[p] = pm
	return pm
}

func (pm *partMetrics) collect(ch chan<- prometheus.Metric, topics []string) {
	for i, t := range topics {
		if lag := pm.lag[i].Load(); lag >= 0 {
			ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(lag), t, pm.label)
		}
	}
	pm.mu.Lock()
	defer pm.mu.Unlock()
	c := &pm.counts
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{pm.label}, labels...)...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{pm.label}, labels...)...)
	}
	counter(descIn, c.In)
	counter(descOut, c.Emitted)
	counter(descDropped, c.DroppedBatch, "batch")
	counter(descDropped, c.DroppedHistory, "history")
	counter(descDLQ, c.DeadLettered)
	ratio := 0.0
	if c.In > 0 {
		ratio = float64(c.DroppedBatch+c.DroppedHistory) / float64(c.In)
	}
	gauge(descRatio, ratio)
	counter(descBloomCheck, c.BloomNegative+c.StoreReads)
	counter(descBloomNeg, c.BloomNegative)
	counter(descFP, c.FalsePositives)
	counter(descStoreRead, c.StoreReads)
	counter(descStoreWrite, pm.storeWrites)
	counter(descTxn, pm.cycles)
	counter(descRestored, pm.restored)
	counter(descMisroute, pm.misrouted)
	ch <- pm.cycle.metric(descCycle, pm.label)
	ch <- pm.e2e.metric(descE2E, pm.label)
	gauge(descRestoreLeft, float64(pm.restoreLeft))
	gauge(descRestoreDone, pm.restoreFrac)
	if st := &pm.state; st.valid {
		gauge(descGen, float64(st.generation))
		gauge(descDisk, float64(st.disk))
		gauge(descFPR, st.fpr)
		for age := range st.keys {
			a := strconv.Itoa(age)
			gauge(descStateKeys, float64(st.keys[age]), a)
			gauge(descStateBytes, float64(st.bytes[age]), a)
			gauge(descFill, st.fill[age], a)
		}
	}
}

// hist is a Prometheus histogram filled in bulk: a cycle's observations are
// bucketed locally and added at once.
type hist struct {
	bounds []float64
	counts []uint64 // per bucket, the last one +Inf; not cumulative
	sum    float64
}

func newHist(bounds []float64) hist {
	return hist{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// bucket returns the index of the bucket of v.
func (h *hist) bucket(v float64) int {
	i, _ := slices.BinarySearch(h.bounds, v)
	return i
}

// merge adds another histogram with the same bounds.
func (h *hist) merge(o *hist) {
	for i, n := range o.counts {
		h.counts[i] += n
	}
	h.sum += o.sum
}

func (h *hist) reset() {
	clear(h.counts)
	h.sum = 0
}

func (h *hist) metric(d *prometheus.Desc, labels ...string) prometheus.Metric {
	cum := make(map[float64]uint64, len(h.bounds))
	var n uint64
	for i, b := range h.bounds {
		n += h.counts[i]
		cum[b] = n
	}
	n += h.counts[len(h.bounds)]
	return prometheus.MustNewConstHistogram(d, n, h.sum, cum, labels...)
}

// stageMetrics is a runner's side of its partition's metrics: what it
// collects during a cycle before publishing it.
type stageMetrics struct {
	pm  *partMetrics
	log func(msg string, args ...any)

	first     time.Time // first batch of the open cycle; zero before it
	ts        []int64   // record timestamps (Unix ms) of the open cycle, reused
	lso       []int64   // per raw topic: last stable offset of the latest fetch
	e2e       hist      // scratch for one cycle
	lastState time.Time

	restoreFrom int64
	restoreProg *progress.Progress
}

func newStageMetrics(j *Job, p int, log func(msg string, args ...any)) *stageMetrics {
	m := &stageMetrics{pm: j.partition(p), log: log, lso: make([]int64, len(j.topics)), e2e: newHist(e2eBuckets), restoreFrom: -1}
	for i := range m.lso {
		m.lso[i] = -1
	}
	return m
}

// batch takes note of a fetched batch of raw topic t before it is handled.
// pos is t's committed position (where the cycle started) and cycleIn the
// records decided in the cycle so far. It touches each record once to keep
// its timestamp and allocates nothing once the cycle buffer has grown.
func (m *stageMetrics) batch(b *fetch.Batch, t int, pos int64, cycleIn uint64) {
	if cycleIn == 0 {
		// A new cycle: whatever an aborted one left is forgotten.
		m.first = time.Now()
		m.ts = m.ts[:0]
	}
	for i := range b.Records {
		m.ts = append(m.ts, b.Records[i].Timestamp.UnixMilli())
	}
	lso := b.LastStableOffset
	if lso < 0 {
		lso = b.HighWatermark
	}
	if lso < 0 {
		return
	}
	m.lso[t] = lso
	if pos < 0 && len(b.Records) > 0 {
		pos = b.Records[0].Offset // first start: no committed offset yet
	}
	if pos >= 0 {
		m.pm.lag[t].Store(max(lso-pos, 0))
	}
}

// committed publishes a committed cycle: its counters, its latencies, the
// lag against the new committed positions pos, and every stateEvery the
// state statistics of stage.
func (m *stageMetrics) committed(pos []int64, cycle *Stats, stage *pipeline.Stage) {
	now := time.Now()
	m.e2e.reset()
	var cycleSec float64
	latency := cycle.In > 0 && !m.first.IsZero() // else only markers or aborted records moved the position
	if latency {
		cycleSec = now.Sub(m.first).Seconds()
		for _, ms := range m.ts {
			if ms <= 0 {
				continue // a record without timestamp (-1)
			}
			d := max(float64(now.UnixMilli()-ms)/1e3, 0)
			m.e2e.counts[m.e2e.bucket(d)]++
			m.e2e.sum += d
		}
	}
	m.ts, m.first = m.ts[:0], time.Time{}
	for t, off := range pos {
		if m.lso[t] >= 0 && off >= 0 {
			m.pm.lag[t].Store(max(m.lso[t]-off, 0))
		}
	}
	var st stateStats
	refresh := now.Sub(m.lastState) >= stateEvery
	if refresh {
		m.lastState = now
		st = readState(stage)
	}
	pm := m.pm
	pm.mu.Lock()
	defer pm.mu.Unlock()
	pm.addCycle(cycle)
	if latency {
		pm.cycle.counts[pm.cycle.bucket(cycleSec)]++
		pm.cycle.sum += cycleSec
		pm.e2e.merge(&m.e2e)
	}
	if refresh {
		pm.state = st
	}
}

// stopped forgets the partition's lag when its runner stops in group mode
// (the partition may move to another member): a frozen value would read as
// a lag that no longer moves.
func (m *stageMetrics) stopped() {
	for i := range m.pm.lag {
		m.pm.lag[i].Store(-1)
	}
}

// settled publishes the counters of a cycle whose ambiguous commit turned
// out to have committed; its latencies are not known any more.
func (m *stageMetrics) settled(cycle *Stats) {
	m.pm.mu.Lock()
	defer m.pm.mu.Unlock()
	m.pm.addCycle(cycle)
}

// addCycle adds a committed cycle's counters; pm.mu is held.
func (pm *partMetrics) addCycle(cycle *Stats) {
	pm.counts.Add(cycle.Counts)
	pm.misrouted += cycle.Misrouted
	pm.cycles++
	pm.storeWrites += cycle.Emitted
}

// readState reads the state statistics of a stage. It runs on the runner's
// goroutine, between cycles, so the store is neither closed nor written
// meanwhile.
func readState(stage *pipeline.Stage) stateStats {
	f := stage.Filter()
	cur := stage.Generation()
	live := int(f.Config().Generations)
	st := stateStats{valid: true, generation: cur, disk: stage.Store().DiskUsage(),
		keys: make([]uint64, live), bytes: make([]uint64, live), fill: make([]float64, live)}
	miss := 1.0
	for _, g := range f.Stats() {
		if age := cur - g.Gen; age < uint64(live) {
			st.keys[age] = g.Added
			st.fill[age] = g.FillRatio
		}
		miss *= 1 - g.EstimatedFPR
	}
	st.fpr = 1 - miss
	if gens, err := stage.Store().Generations(); err == nil {
		for _, g := range gens {
			if g.Gen <= cur && cur-g.Gen < uint64(live) {
				st.bytes[cur-g.Gen] = g.Bytes
			}
		}
	}
	return st
}

// restored takes note of one batch read back from the output in recovery:
// the read started at from and runs to offset to. It keeps the restore
// gauges and logs progress every progress.LineInterval.
func (m *stageMetrics) restored(from, to int64, b *fetch.Batch) {
	if m.restoreProg == nil || m.restoreFrom != from {
		m.restoreFrom = from
		m.restoreProg = progress.NewFunc("restore", to-from, progress.LineInterval, func(s progress.Snapshot, final bool) {
			if !final {
				m.log("restoring the store from the committed output", "offsets_done", s.Done, "offsets_total", s.Total,
					"percent", math.Round(1000*s.Fraction())/10, "per_second", math.Round(s.Rate()), "eta", s.ETA().Round(time.Second))
			}
		})
	}
	done := b.NextOffset - from
	m.restoreProg.Set(done)
	left := max(to-b.NextOffset, 0)
	if left == 0 {
		m.restoreProg.Finish()
		m.restoreProg, m.restoreFrom = nil, -1
	}
	pm := m.pm
	pm.mu.Lock()
	defer pm.mu.Unlock()
	pm.restored += uint64(len(b.Records))
	pm.storeWrites += uint64(len(b.Records))
	pm.restoreLeft = left
	pm.restoreFrac = 1
	if to > from {
		pm.restoreFrac = min(float64(done)/float64(to-from), 1)
	}
}

// NewBuildInfo returns the collector of dedupstream_build_info for the
// given version string; the Go version and VCS revision come from the
// binary's build information.
func NewBuildInfo(version string) prometheus.Collector {
	rev := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	return buildInfo{prometheus.MustNewConstMetric(descBuild, prometheus.GaugeValue, 1, version, runtime.Version(), rev)}
}

type buildInfo struct{ m prometheus.Metric }

func (b buildInfo) Describe(ch chan<- *prometheus.Desc) { ch <- descBuild }
func (b buildInfo) Collect(ch chan<- prometheus.Metric) { ch <- b.m }

// Ready reports whether an assignment is current and every stage of it has
// completed recovery and is processing input: the /readyz condition.
func (j *Job) Ready() bool {
	s := j.Stats()
	return s.Assignment && s.Ready == s.Assigned
}
