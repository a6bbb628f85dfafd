package job

// What the runners publish for the collector: each partition's counters,
// histograms and state statistics (partMetrics, kept by the Job across runs
// of the partition), and a runner's side of them (stageMetrics).

import (
	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/internal/progress"
	"github.com/dedupstream/dedupstream/pipeline"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

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
	unkeyed     uint64 // output records restores left out (pipeline.Restored.Unkeyed)
	storeWrites uint64
	ambiguous   [ambiguousOutcomes]uint64 // settled ambiguous commits by outcome
	corruptions uint64                    // stores found corrupt (corrupt.go)
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
	bloom      uint64   // bytes of the Bloom front
	keys       []uint64 // by age
	bytes      []uint64
	fill       []float64
	genFPR     []float64
	subs       []int
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
	every     time.Duration // state refresh interval

	restoreFrom int64
	restoreProg *progress.Progress
}

func newStageMetrics(j *Job, p int, log func(msg string, args ...any)) *stageMetrics {
	m := &stageMetrics{pm: j.partition(p), log: log, every: j.opts.stateEvery(), lso: make([]int64, len(j.topics)), e2e: newHist(e2eBuckets), restoreFrom: -1}
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
	m.ts = slices.Grow(m.ts, len(b.Records))
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
// lag against the new committed positions pos, and every m.every the
// state statistics of stage.
func (m *stageMetrics) committed(pos []int64, cycle *Stats, stage *pipeline.Stage) {
	now := time.Now()
	m.e2e.reset()
	var cycleSec float64
	latency := cycle.In > 0 && !m.first.IsZero() // else only markers or aborted records moved the position
	if latency {
		cycleSec = now.Sub(m.first).Seconds()
		m.e2e.observeAges(now.UnixMilli(), m.ts)
	}
	m.ts, m.first = m.ts[:0], time.Time{}
	for t, off := range pos {
		if m.lso[t] >= 0 && off >= 0 {
			m.pm.lag[t].Store(max(m.lso[t]-off, 0))
		}
	}
	var st stateStats
	refresh := now.Sub(m.lastState) >= m.every
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

// Outcomes of an ambiguous commit, once recovery settled it (the outcome
// label of dedupstream_ambiguous_commits_total).
const (
	ambiguousCommitted = iota // the transaction had committed
	ambiguousAborted          // it had not
	ambiguousTimedOut         // it had not: open past the transaction timeout, the coordinator aborted it
	ambiguousOutcomes
)

var ambiguousLabels = [ambiguousOutcomes]string{"committed", "aborted", "timed_out"}

// ambiguous counts a settled ambiguous commit by outcome.
func (m *stageMetrics) ambiguous(outcome int) {
	m.pm.mu.Lock()
	m.pm.ambiguous[outcome]++
	m.pm.mu.Unlock()
}

// corrupt counts a store found corrupt.
func (m *stageMetrics) corrupt() {
	m.pm.mu.Lock()
	m.pm.corruptions++
	m.pm.mu.Unlock()
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
	ps := stage.Stats()
	cur, live := ps.Generation, ps.LiveGenerations
	st := stateStats{valid: true, generation: cur, disk: ps.DiskBytes,
		keys: make([]uint64, live), bytes: make([]uint64, live), fill: make([]float64, live),
		genFPR: make([]float64, live), subs: make([]int, live)}
	miss := 1.0
	for _, g := range ps.Filter {
		if age := cur - g.Gen; age < uint64(live) {
			st.keys[age] = g.Added
			st.fill[age] = g.FillRatio
			st.genFPR[age] = g.EstimatedFPR
			st.subs[age] = g.SubFilters
		}
		miss *= 1 - g.EstimatedFPR
	}
	st.fpr = 1 - miss
	st.bloom = uint64(ps.FilterBytes)
	for _, g := range ps.Store {
		if g.Gen <= cur && cur-g.Gen < uint64(live) {
			st.bytes[cur-g.Gen] = g.Bytes
		}
	}
	return st
}

// restored takes note of one batch read back from the output in recovery:
// the read started at from and runs to offset to. It keeps the restore
// gauges and logs progress every progress.LineInterval.
func (m *stageMetrics) restored(from, to int64, b *fetch.Batch) {
	m.restoredUpTo(from, to, b.NextOffset, len(b.Records))
}

// restoredUpTo is restored for a batch of n records that ends at next. The
// progress stays below 1 until restoreDurable.
func (m *stageMetrics) restoredUpTo(from, to, next int64, n int) {
	if m.restoreProg == nil || m.restoreFrom != from {
		m.restoreFrom = from
		m.restoreProg = progress.NewFunc("restore", to-from, progress.LineInterval, func(s progress.Snapshot, final bool) {
			if !final {
				m.log("restoring the store from the committed output", "offsets_done", s.Done, "offsets_total", s.Total,
					"percent", math.Round(1000*s.Fraction())/10, "per_second", math.Round(s.Rate()), "eta", s.ETA().Round(time.Second))
			}
		})
	}
	done := next - from
	m.restoreProg.Set(done)
	left := max(to-next, 0)
	pm := m.pm
	pm.mu.Lock()
	defer pm.mu.Unlock()
	pm.restored += uint64(n)
	pm.storeWrites += uint64(n)
	pm.restoreLeft = left
	pm.restoreFrac = restoreReadCap
	if to > from {
		pm.restoreFrac = min(float64(done)/float64(to-from), restoreReadCap)
	}
}

// restoreUnkeyed takes note of n output records a restore left out for
// want of a business key.
func (m *stageMetrics) restoreUnkeyed(n int) {
	pm := m.pm
	pm.mu.Lock()
	defer pm.mu.Unlock()
	pm.unkeyed += uint64(n)
	pm.storeWrites -= uint64(n)
}

// restoreReadCap is the most the restore progress shows while the keys
// read are not yet durable in the store: it reaches 1 at restoreDurable.
const restoreReadCap = 0.99

// restoreDurable ends the restore's progress: the store holds every
// restored key durably (Stage.EndRestore returned).
func (m *stageMetrics) restoreDurable() {
	if m.restoreProg != nil {
		m.restoreProg.Finish()
		m.restoreProg, m.restoreFrom = nil, -1
	}
	pm := m.pm
	pm.mu.Lock()
	defer pm.mu.Unlock()
	pm.restoreLeft, pm.restoreFrac = 0, 1
}
