package job

import (
	"bytes"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/statestore"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestMemoryPlanPerAssignment: the stores of an assignment share the run's
// one cache and get the memtable size planned for that assignment's
// partition count; a group generation owning more or fewer partitions than
// the last one gets a new plan, and one the budget cannot hold is reported,
// not refused.
func TestMemoryPlanPerAssignment(t *testing.T) {
	var logs bytes.Buffer
	cfg := &config.Config{State: config.State{Dir: t.TempDir(), Memory: 512 << 20}}
	j := &Job{cfg: cfg, log: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := j.openMemory(); err != nil {
		t.Fatal(err)
	}
	defer j.closeMemory()
	cache := j.mem.budget.Options(statestore.Options{}, 1).Cache

	for _, c := range []struct {
		parts    int
		memTable uint64
		over     float64
	}{
		{16, 256 << 20 / 48 &^ (64<<10 - 1), 0}, // 5.3 MiB
		{4, 256 << 20 / 12 &^ (64<<10 - 1), 0},  // the group shrank: 21.3 MiB
		{1, 32 << 20, 0},                        // capped
		{64, 4 << 20, 1},                        // 64 x 3 x 4 MiB > 256 MiB: over budget
	} {
		j.planMemory(c.parts)
		o := j.storeOptions(statestore.Options{})
		if o.Cache != cache || o.Cache == nil {
			t.Fatalf("%d partitions: store options carry cache %p, the run's is %p", c.parts, o.Cache, cache)
		}
		if o.MemTableSize != c.memTable {
			t.Fatalf("%d partitions: memtable %d, want %d", c.parts, o.MemTableSize, c.memTable)
		}
		got := gatherMemory(t, j)
		if got["dedupstream_state_memtable_size_bytes"] != float64(c.memTable) ||
			got["dedupstream_state_memory_over_budget"] != c.over ||
			got["dedupstream_state_memory_budget_bytes"] != float64(512<<20) {
			t.Fatalf("%d partitions: metrics %v", c.parts, got)
		}
		// The indexes' reservation: what the stores of the plan charge to
		// the budget, within its half when the plan fits.
		idx := got["dedupstream_state_index_memory_bytes"]
		if idx < float64(2*c.parts)*float64(c.memTable)/2 || c.over == 0 && idx > 256<<20 {
			t.Fatalf("%d partitions of %d-byte indexes: index memory %.0f", c.parts, c.memTable, idx)
		}
	}
	if !strings.Contains(logs.String(), "state.memory is too small") || !strings.Contains(logs.String(), "memory_needed=1536MiB") {
		t.Errorf("the over-budget generation was not reported:\n%s", logs.String())
	}

}

func gatherMemory(t *testing.T, j *Job) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	j.collectMemory(ch)
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		name := m.Desc().String()
		name = name[strings.Index(name, `"`)+1:]
		name = name[:strings.Index(name, `"`)]
		out[name] = pb.GetGauge().GetValue()
	}
	return out
}

// TestTuneGC: without GOGC in the environment the job's GC target is
// DefaultGCPercent; with it, the environment's stays; TuneGC returns the
// target it replaced.
func TestTuneGC(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	if prev := TuneGC(); prev != 100 {
		t.Fatalf("TuneGC returned %d, want the replaced 100", prev)
	}
	if got := debug.SetGCPercent(80); got != DefaultGCPercent {
		t.Fatalf("GC target %d after TuneGC, want %d", got, DefaultGCPercent)
	}
	t.Setenv("GOGC", "80") // as if the runtime had read it at start
	if prev := TuneGC(); prev != 80 {
		t.Fatalf("TuneGC returned %d with GOGC=80 set, want 80", prev)
	}
	if got := debug.SetGCPercent(100); got != 80 {
		t.Fatalf("GC target %d with GOGC=80 set, want it kept", got)
	}
}
