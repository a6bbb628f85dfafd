package job

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/pipeline"
)

// TestMetricsHooksDoNotAllocate: once its buffers have grown, a runner's
// per-batch and per-cycle metric hooks allocate nothing, however many
// records a batch holds.
func TestMetricsHooksDoNotAllocate(t *testing.T) {
	j := &Job{topics: []string{"raw"}, opts: Options{hooks: testhook.Hooks{StateEvery: time.Hour}}}
	m := newStageMetrics(j, 0, func(string, ...any) {})
	m.lastState = time.Now()
	var b fetch.Batch
	now := time.Now()
	for i := range 5_000 {
		b.Records = append(b.Records, fetch.Record{Offset: int64(i), Timestamp: now.Add(-time.Duration(i) * time.Millisecond)})
	}
	b.LastStableOffset = 6_000
	cycle := &Stats{Counts: pipeline.Counts{In: 5_000, Emitted: 4_000, DroppedBatch: 1_000}}
	pos := []int64{5_000}
	run := func() {
		m.batch(&b, 0, 0, 0)
		m.batch(&b, 0, 0, 5_000)
		m.committed(pos, cycle, nil)
	}
	run()
	if n := testing.AllocsPerRun(50, run); n != 0 {
		t.Errorf("%v allocations per cycle of two 5000-record batches", n)
	}
	pm := m.pm
	if pm.cycles != 52 || pm.counts.In != 52*5_000 || pm.e2e.counts[len(pm.e2e.counts)-1] != 0 {
		t.Errorf("cycles %d, in %d", pm.cycles, pm.counts.In)
	}
	var n uint64
	for _, c := range pm.e2e.counts {
		n += c
	}
	if n != 52*10_000 { // run once by hand, once as AllocsPerRun warm-up, 50 measured
		t.Errorf("%d end-to-end observations, want one per record (%d)", n, 52*10_000)
	}
	if lag := pm.lag[0].Load(); lag != 1_000 {
		t.Errorf("lag %d, want last stable offset 6000 minus committed 5000", lag)
	}
}

// TestRestoreProgress: a restore's batches move the gauges towards done,
// which they reach only when the store holds the keys durably
// (restoreDurable, after Stage.EndRestore), and a long restore logs its
// progress every progress.LineInterval.
func TestRestoreProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lines []string
		j := &Job{topics: []string{"raw"}}
		m := newStageMetrics(j, 3, func(msg string, args ...any) { lines = append(lines, fmt.Sprint(append([]any{msg}, args...)...)) })
		pm := m.pm
		batch := func(next int64, n int) *fetch.Batch {
			return &fetch.Batch{NextOffset: next, Records: make([]fetch.Record, n)}
		}
		m.restored(1000, 2000, batch(1100, 90))
		if pm.restoreLeft != 900 || pm.restoreFrac != 0.1 || pm.restored != 90 || len(lines) != 0 {
			t.Fatalf("after the first batch: left %d, fraction %v, restored %d, %d log lines", pm.restoreLeft, pm.restoreFrac, pm.restored, len(lines))
		}
		time.Sleep(6 * time.Second)
		m.restored(1000, 2000, batch(1500, 400))
		if len(lines) != 1 || !strings.Contains(lines[0], "offsets_done500offsets_total1000percent50") {
			t.Fatalf("log lines after 6s: %q", lines)
		}
		m.restored(1000, 2000, batch(2000, 500))
		if pm.restoreLeft != 0 || pm.restoreFrac >= 1 || pm.restored != 990 || pm.storeWrites != 990 || len(lines) != 1 {
			t.Errorf("after the last batch, the keys not yet durable: left %d, fraction %v (want < 1), restored %d, writes %d, %d log lines", pm.restoreLeft, pm.restoreFrac, pm.restored, pm.storeWrites, len(lines))
		}
		m.restoreDurable()
		if pm.restoreLeft != 0 || pm.restoreFrac != 1 {
			t.Errorf("after the store wrote the restore: left %d, fraction %v, want 0 and 1", pm.restoreLeft, pm.restoreFrac)
		}
		// A new restore (after another crash) starts its own progress.
		m.restored(2000, 2500, batch(2100, 100))
		if pm.restoreLeft != 400 || pm.restoreFrac != 0.2 {
			t.Errorf("second restore: left %d, fraction %v", pm.restoreLeft, pm.restoreFrac)
		}
	})
}

// BenchmarkMetricsHooks measures what the metric hooks cost per record: a
// cycle of two 5000-record batches and its commit (state refresh off).
func BenchmarkMetricsHooks(b *testing.B) {
	j := &Job{topics: []string{"raw"}, opts: Options{hooks: testhook.Hooks{StateEvery: time.Hour}}}
	m := newStageMetrics(j, 0, func(string, ...any) {})
	m.lastState = time.Now()
	var batch fetch.Batch
	now := time.Now()
	for i := range 5_000 {
		batch.Records = append(batch.Records, fetch.Record{Offset: int64(i), Timestamp: now.Add(-time.Duration(i) * time.Millisecond)})
	}
	batch.LastStableOffset = 6_000
	cycle := &Stats{Counts: pipeline.Counts{In: 10_000}}
	pos := []int64{5_000}
	b.ReportAllocs()
	for b.Loop() {
		m.batch(&batch, 0, 0, 0)
		m.batch(&batch, 0, 0, 5_000)
		m.committed(pos, cycle, nil)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/record")
}
