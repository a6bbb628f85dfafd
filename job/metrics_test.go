package job_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/statestore"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// series is one gathered registry: "name{l1="v1",l2="v2"}" -> value, labels
// in the registry's (sorted) order. Histograms appear as name_count,
// name_sum and name_bucket{...,le="x"}.
type series map[string]float64

func gather(t *testing.T, cs ...prometheus.Collector) series {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := series{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := func(suffix string, extra ...string) string {
				all := append(slices.Clone(ls), extra...)
				sort.Strings(all)
				if len(all) == 0 {
					return f.GetName() + suffix
				}
				return f.GetName() + suffix + "{" + strings.Join(all, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key("_count")] = float64(h.GetSampleCount())
				out[key("_sum")] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[key("_bucket", fmt.Sprintf("le=%q", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))] = float64(b.GetCumulativeCount())
				}
				out[key("_bucket", `le="+Inf"`)] = float64(h.GetSampleCount())
			}
		}
	}
	return out
}

// names returns the metric names (without labels) of s.
func (s series) names() []string {
	set := map[string]bool{}
	for k := range s {
		name, _, _ := strings.Cut(k, "{")
		set[name] = true
	}
	var out []string
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// get returns a series that must exist.
func (s series) get(t *testing.T, key string) float64 {
	t.Helper()
	v, ok := s[key]
	if !ok {
		t.Errorf("metric %s missing", key)
	}
	return v
}

// expectation is what a workload must produce on one partition, computed
// from the records alone.
type expectation struct {
	in, out, dlq int
}

func expectPerPartition(w *jobtest.Workload) map[int]*expectation {
	want := map[int]*expectation{}
	for p := range w.Spec.Partitions {
		want[p] = &expectation{}
	}
	for _, r := range w.Records {
		want[int(r.Partition)].in++
		if strings.HasPrefix(string(r.Key), "bad-") {
			want[int(r.Partition)].dlq++
		}
	}
	for k := range w.First {
		want[partition.Murmur2Partition([]byte(k), w.Spec.Partitions)].out++
	}
	return want
}

// everyCommit makes the job refresh its state metrics on every commit.
func everyCommit(o *job.Options) { testhook.Set(o, testhook.Hooks{StateEvery: time.Nanosecond}) }

// TestMetrics runs the job on the embedded broker and checks every
// per-partition metric against counts computed from the workload itself.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	w := e.workload(11, 6_000, 1_500)
	cfg := e.config("0, 1, 2, 3")
	r := e.start(cfg, everyCommit) // refresh state metrics on every commit
	startMs := time.Now().UnixMilli()
	// Input arrives while the job runs, over several cycles.
	for deadline := time.Now().Add(30 * time.Second); !r.job.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("job not ready within 30s")
		}
	}
	for chunk := range slices.Chunk(w.Records, 1_000) {
		e.produce(chunk)
		time.Sleep(20 * time.Millisecond)
	}
	e.waitCommitted(r, 1, 45*time.Second)
	// Lag is published per fetch and per commit: wait for the last commit's.
	deadline := time.Now().Add(10 * time.Second)
	var s series
	for {
		s = gather(t, r.job.Collector())
		lagged := false
		for p := range partitions {
			lagged = lagged || s[fmt.Sprintf(`dedupstream_consumer_lag_records{partition="%d",topic=%q}`, p, e.raw)] != 0
		}
		if !lagged || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := s.get(t, "dedupstream_ready_stages"); got != partitions {
		t.Errorf("ready stages %v while running, want %d", got, partitions)
	}
	// One state budget for the instance: the config's, its memtable
	// override for every store, and blocks cached within it.
	if got := s.get(t, "dedupstream_state_memory_budget_bytes"); got != float64(cfg.State.Memory) {
		t.Errorf("memory budget %v, want state.memory %d", got, cfg.State.Memory)
	}
	if got := s.get(t, "dedupstream_state_memtable_size_bytes"); got != float64(cfg.State.MemTableSize) {
		t.Errorf("memtable size %v, want state.memtable_size %d", got, cfg.State.MemTableSize)
	}
	if got := s.get(t, "dedupstream_state_memory_over_budget"); got != 0 {
		t.Errorf("over budget %v with %d partitions in %v", got, partitions, cfg.State.Memory)
	}
	if got := s.get(t, "dedupstream_state_block_cache_used_bytes"); got < 0 || got > float64(cfg.State.Memory) {
		t.Errorf("block cache used %v of %v", got, cfg.State.Memory)
	}
	// Stores of a few keys need little room: the cache keeps the data
	// room and the runs' filter and index blocks, not the whole budget.
	if got := s.get(t, "dedupstream_state_block_room_bytes"); got < float64(statestore.BlockDataRoom) || got > float64(statestore.BlockDataRoom+4<<20) {
		t.Errorf("block room %v of %v: want the data room %d plus what the runs need (< 4 MiB here)", got, cfg.State.Memory, statestore.BlockDataRoom)
	}
	e.stop(r)
	elapsed := float64(time.Now().UnixMilli()-startMs) / 1e3
	s = gather(t, r.job.Collector())
	st := r.job.Stats()
	want := expectPerPartition(w)
	genSpan := (24 * time.Hour / 4).Milliseconds()

	var sumIn, sumOut, sumDropped, sumCycles float64
	for p := range partitions {
		pl := fmt.Sprintf(`partition="%d"`, p)
		m := func(name string, extra ...string) float64 {
			ls := append([]string{pl}, extra...)
			sort.Strings(ls) // the registry's label order
			return s.get(t, name+"{"+strings.Join(ls, ",")+"}")
		}
		x := want[p]
		in, out, dlq := m("dedupstream_records_in_total"), m("dedupstream_records_out_total"), m("dedupstream_dlq_records_total")
		batch, hist := m("dedupstream_duplicates_dropped_total", `reason="batch"`), m("dedupstream_duplicates_dropped_total", `reason="history"`)
		if in != float64(x.in) || out != float64(x.out) || dlq != float64(x.dlq) {
			t.Errorf("partition %d: in/out/dlq = %v/%v/%v, the workload has %d/%d/%d", p, in, out, dlq, x.in, x.out, x.dlq)
		}
		if batch+hist != in-out-dlq || batch == 0 {
			t.Errorf("partition %d: dropped batch %v + history %v, want %v with batch > 0", p, batch, hist, in-out-dlq)
		}
		if r := m("dedupstream_duplicate_ratio"); math.Abs(r-(batch+hist)/in) > 1e-12 {
			t.Errorf("partition %d: duplicate ratio %v, want %v", p, r, (batch+hist)/in)
		}
		neg, reads, fp := m("dedupstream_bloom_negatives_total"), m("dedupstream_store_reads_total"), m("dedupstream_bloom_false_positives_total")
		if c := m("dedupstream_bloom_checks_total"); c != neg+reads {
			t.Errorf("partition %d: bloom checks %v, want negatives %v + store reads %v", p, c, neg, reads)
		}
		// Every emitted key was tested once; every history drop was a read.
		if neg+fp != out || reads != hist+fp {
			t.Errorf("partition %d: negatives %v + false positives %v != out %v, or reads %v != history %v + fp %v", p, neg, fp, out, reads, hist, fp)
		}
		if w := m("dedupstream_store_writes_total"); w != out {
			t.Errorf("partition %d: store writes %v, want out %v (nothing restored)", p, w, out)
		}
		cycles := m("dedupstream_transactions_total")
		// One observation per committed cycle that decided records (a
		// cycle may commit only a resolved start position).
		if n := m("dedupstream_cycle_duration_seconds_count"); n > cycles || n < 1 || m("dedupstream_cycle_duration_seconds_sum") <= 0 {
			t.Errorf("partition %d: %v cycle latency observations for %v transactions", p, n, cycles)
		}
		if n := m("dedupstream_end_to_end_latency_seconds_count"); n != in {
			t.Errorf("partition %d: %v end-to-end observations, want one per input record (%v)", p, n, in)
		}
		// Every record was produced and committed within the test.
		if within := m("dedupstream_end_to_end_latency_seconds_bucket", `le="60"`); within != in {
			t.Errorf("partition %d: %v of %v records within 60s end to end", p, within, in)
		}
		if sum := m("dedupstream_end_to_end_latency_seconds_sum"); sum <= 0 || sum > in*elapsed {
			t.Errorf("partition %d: end-to-end sum %vs for %v records over a %vs test", p, sum, in, elapsed)
		}
		if lag := m(`dedupstream_consumer_lag_records`, fmt.Sprintf("topic=%q", e.raw)); lag != 0 {
			t.Errorf("partition %d: lag %v after the job caught up", p, lag)
		}
		var keys float64
		for age := range 5 {
			keys += m("dedupstream_state_keys", fmt.Sprintf(`age="%d"`, age))
			m("dedupstream_state_bytes", fmt.Sprintf(`age="%d"`, age))
		}
		// Keys of an aborted cycle stay counted (and in the Bloom front):
		// exact only when no recovery beyond the first ran.
		if keys != out && !(st.Recoveries > partitions && keys > out) {
			t.Errorf("partition %d: state keys %v over all generations, want the %v emitted (recoveries %d)", p, keys, out, st.Recoveries)
		}
		if f := m("dedupstream_bloom_fill_ratio", `age="0"`); f <= 0 || f >= 0.5 {
			t.Errorf("partition %d: bloom fill %v", p, f)
		}
		if fpr, subs := m("dedupstream_bloom_generation_false_positive_rate", `age="0"`), m("dedupstream_bloom_subfilters", `age="0"`); fpr <= 0 || fpr > 0.01 || subs != 1 {
			t.Errorf("partition %d: newest generation: estimated false-positive rate %v, want in (0, 0.01]; %v sub-filters, want 1", p, fpr, subs)
		}
		if fpr := m("dedupstream_bloom_estimated_false_positive_rate"); fpr <= 0 || fpr > 0.01 {
			t.Errorf("partition %d: estimated false-positive rate %v, want in (0, 0.01]", p, fpr)
		}
		if g := m("dedupstream_window_generation"); g < float64(startMs/genSpan) || g > float64(time.Now().UnixMilli()/genSpan) {
			t.Errorf("partition %d: generation %v, want the wall clock's (%d)", p, g, startMs/genSpan)
		}
		if d := m("dedupstream_state_disk_bytes"); d <= 0 {
			t.Errorf("partition %d: disk bytes %v", p, d)
		}
		// About 2 bytes per expected key at 1 % false positives (1.2 per
		// key of each generation, and a generation more than the window).
		if b, keys := m("dedupstream_bloom_memory_bytes"), float64(cfg.Dedup.ExpectedKeys); b < keys || b > 3*keys {
			t.Errorf("partition %d: Bloom front %v bytes for %v expected keys", p, b, keys)
		}
		if m("dedupstream_restore_progress_ratio") != 1 || m("dedupstream_restore_remaining_records") != 0 {
			t.Errorf("partition %d: a restore is reported where none ran", p)
		}
		sumIn += in
		sumOut += out
		sumDropped += batch + hist
		sumCycles += cycles
	}
	if sumIn != float64(len(w.Records)) || sumOut != float64(len(w.First)) || sumDropped != float64(w.Dropped()) || sumCycles != float64(st.Cycles) {
		t.Errorf("totals in %v out %v dropped %v cycles %v; want %d %d %d %d", sumIn, sumOut, sumDropped, sumCycles, len(w.Records), len(w.First), w.Dropped(), st.Cycles)
	}
	if got := s.get(t, "dedupstream_ready_stages"); got != 0 {
		t.Errorf("ready stages %v after stop", got)
	}
	if got := s.get(t, "dedupstream_recoveries_total"); got != float64(st.Recoveries) || got < partitions {
		t.Errorf("recoveries %v, stats say %d", got, st.Recoveries)
	}

	// A restart without partition 2's state restores exactly that
	// partition's output and reports it.
	if err := os.RemoveAll(filepath.Join(cfg.State.Dir, "partition-2")); err != nil {
		t.Fatal(err)
	}
	r2 := e.start(cfg)
	for deadline := time.Now().Add(30 * time.Second); !r2.job.Ready(); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-r2.done:
			r2.done <- err
			t.Fatalf("second run exited before it was ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("second run not ready within 30s: %+v", r2.job.Stats())
		}
	}
	e.stop(r2)
	s2 := gather(t, r2.job.Collector())
	for p := range partitions {
		pl := fmt.Sprintf(`{partition="%d"}`, p)
		wantRestored := 0.0
		if p == 2 {
			wantRestored = float64(want[p].out)
		}
		if got := s2.get(t, "dedupstream_restored_records_total"+pl); got != wantRestored {
			t.Errorf("partition %d: restored %v, want %v", p, got, wantRestored)
		}
		if got := s2.get(t, "dedupstream_store_writes_total"+pl); got != wantRestored {
			t.Errorf("partition %d: store writes %v, want %v", p, got, wantRestored)
		}
		if s2.get(t, "dedupstream_restore_progress_ratio"+pl) != 1 || s2.get(t, "dedupstream_restore_remaining_records"+pl) != 0 {
			t.Errorf("partition %d: restore not reported complete", p)
		}
	}
	// Last, as the reader appends sentinels to the output.
	e.verify(w, st)
}

func TestBuildInfo(t *testing.T) {
	s := gather(t, job.NewBuildInfo("v9.8.7"))
	var found bool
	for k, v := range s {
		if strings.HasPrefix(k, "dedupstream_build_info{") && strings.Contains(k, `version="v9.8.7"`) && v == 1 {
			found = true
		}
	}
	if !found {
		t.Errorf("no dedupstream_build_info with the version: %v", s)
	}
}
