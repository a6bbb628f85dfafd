package harness

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/bench/workload"
)

func quiet() *Progress { return NewProgress(io.Discard, time.Hour) }

// TestEngineSystemsAgreeWithTheGroundTruth runs every engine system on one
// small stream with every kind of duplicate: each must be valid and drop
// exactly the stream's duplicates.
func TestEngineSystemsAgreeWithTheGroundTruth(t *testing.T) {
	c := EngineCase{Case: CaseSweep, Spec: workload.Spec{Seed: 3, KeysPerWindow: 30_000, DupRatio: 0.3, Zipf: 1.2}, Records: 40_000, Restart: true, Dir: t.TempDir()}
	stage, err := RunStage(c, quiet())
	if err != nil {
		t.Fatal(err)
	}
	c.NoWAL = true
	nowal, err := RunStage(c, quiet())
	if err != nil {
		t.Fatal(err)
	}
	m, err := RunMap(c, quiet())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Result{stage, nowal, m} {
		if !r.Valid || r.Correct.Expected == 0 || r.Correct.Emitted != r.Correct.Expected {
			t.Errorf("%s: %v", r.System, r.Correct)
		}
		if r.RecordsPerSec <= 0 || r.Records != 40_000 || r.DupRatio < 0.25 || r.DupRatio > 0.35 {
			t.Errorf("%s: records %d, %.0f/s, dup %.3f", r.System, r.Records, r.RecordsPerSec, r.DupRatio)
		}
	}
	if stage.ReadyCrashSec <= 0 || stage.ReadyRebuildSec <= 0 || stage.ReadySnapshotSec <= 0 {
		t.Errorf("restart not measured: %+v", stage)
	}
	if stage.BloomBytesPerKey <= 0 || stage.DiskBytesPerKey <= 0 || stage.Latency == nil || stage.StoreReadsPerRecord <= 0 {
		t.Errorf("stage result lacks figures: %+v", stage)
	}
	if stage.System != SysDedup || nowal.System != SysDedupNoWAL {
		t.Errorf("systems %q and %q", stage.System, nowal.System)
	}
}

func TestSummariseAndTargets(t *testing.T) {
	res := func(cs, sys string, keys int, dup, rps float64, valid bool) Result {
		return Result{Case: cs, System: sys, KeysInWindow: keys, Workload: workload.Spec{DupRatio: dup}, RecordsPerSec: rps, Valid: valid}
	}
	results := []Result{
		res(CaseE2EEmbedded, SysCopy, 4, 0.05, 90, true),
		res(CaseE2EEmbedded, SysDedup, 4, 0.05, 60, true),
		res(CaseE2EEmbedded, SysCopy, 4, 0.05, 110, true),
		res(CaseE2EEmbedded, SysDedup, 4, 0.05, 90, true),
		res(CaseE2EEmbedded, SysDedup, 4, 0.05, 80, false),
		res(CaseEngine, SysDedup, 1_000_000, 0.05, 300, true),
		res(CaseEngine, SysRedis, 1_000_000, 0.05, 20, true),
		res(CaseSweep, SysDedup, 1_000_000, 0.05, 200, true),
		res(CaseSweep, SysDedup, 100_000_000, 0.05, 120, true),
	}
	// CPU per record of the sweep points: 0.3 at 1M, 0.75 at 100M.
	results[len(results)-2].CPUUsPerRecord, results[len(results)-1].CPUUsPerRecord = 0.3, 0.75
	rows := Summarise(results)
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rows))
	}
	d := rows[1]
	if d.System != SysDedup || d.Reps != 3 || d.RecordsPerSec != 80 || d.Min != 60 || d.Max != 90 || d.Valid {
		t.Fatalf("dedup row %+v: want median 80 of 3 reps, one invalid", d)
	}
	if rows[0].RecordsPerSec != 100 {
		t.Fatalf("copy median %v, want 100", rows[0].RecordsPerSec)
	}
	ts := Targets(rows)
	want := map[string]bool{"end to end": true, "Redis": true, "largest window": true} // name fragments still to see
	for _, tg := range ts {
		for k := range want {
			if strings.Contains(tg.Name, k) {
				delete(want, k)
				switch {
				case !tg.Known:
					t.Errorf("%s: not known", tg.Name)
				case k == "end to end" && tg.Met: // 80/100 = 0.8 >= 0.8
				case k == "end to end":
					t.Errorf("%s: %s judged missed", tg.Name, tg.Measured)
				case k == "Redis" && !tg.Met: // 15x
					t.Errorf("%s: %s judged missed", tg.Name, tg.Measured)
				case k == "largest window" && tg.Met != false: // 0.6x
					t.Errorf("%s: %s judged met, want missed", tg.Name, tg.Measured)
				case k == "largest window" && !strings.Contains(tg.Measured, "by CPU per record 0.300 / 0.750 us: 0.40x"):
					t.Errorf("%s: %s lacks the ratio by CPU (0.40x)", tg.Name, tg.Measured)
				}
			}
		}
	}
	if len(want) > 0 {
		t.Fatalf("targets missing: %v", want)
	}
	var md bytes.Buffer
	WriteMarkdown(&md, &Run{}, rows)
	if !strings.Contains(md.String(), "**INVALID**") || !strings.Contains(md.String(), "0.80x") {
		t.Fatalf("markdown lacks the invalid mark or the ratio:\n%s", md.String())
	}
}

func TestSVGIsWellFormed(t *testing.T) {
	rows := Summarise([]Result{
		{Case: CaseSweep, System: SysDedup, KeysInWindow: 1_000_000, Workload: workload.Spec{DupRatio: 0.05}, RecordsPerSec: 200_000},
		{Case: CaseSweep, System: SysDedup, KeysInWindow: 10_000_000, Workload: workload.Spec{DupRatio: 0.05}, RecordsPerSec: 150_000},
		{Case: CaseEngine, System: SysDedup, KeysInWindow: 1_000_000, Workload: workload.Spec{DupRatio: 0.2}, RecordsPerSec: 250_000},
		{Case: CaseEngine, System: SysRedis, KeysInWindow: 1_000_000, Workload: workload.Spec{DupRatio: 0.2}, RecordsPerSec: 20_000},
	})
	panels := Plots(rows)
	if len(panels) != 2 || len(panels[0].Series) != 1 || len(panels[0].Series[0].Points) != 2 || len(panels[1].Series) != 2 {
		t.Fatalf("panels %+v", panels)
	}
	var b bytes.Buffer
	WriteSVG(&b, panels)
	dec := xml.NewDecoder(&b)
	circles := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "circle" {
			circles++
		}
	}
	if circles != 4 {
		t.Fatalf("%d points drawn, want 4", circles)
	}
}

// TestEndToEndOnTheEmbeddedBroker runs the copy job and the real job on a
// small stream with duplicates over two raw topics: both must be valid, the
// job must drop exactly the duplicates and the copy job copy everything.
func TestEndToEndOnTheEmbeddedBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and the job")
	}
	c := E2ECase{
		Spec:     workload.Spec{Seed: 5, KeysPerWindow: 80_000, DupRatio: 0.2, Partitions: 3, Topics: 2, PayloadBytes: 40},
		Records:  20_000,
		Reps:     1,
		Interval: 50 * time.Millisecond, MaxRecords: 5_000, Replication: 1, Dir: t.TempDir(),
	}
	out := t.TempDir()
	c.TimedProfile, c.TimedTrace = filepath.Join(out, "cpu"), filepath.Join(out, "trace")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := RunE2E(ctx, c, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	// One CPU profile and one execution trace of each job run's timed span.
	for _, f := range []string{"cpu-copy-job-0.pprof", "cpu-dedupstream-0.pprof", "trace-copy-job-0.trace", "trace-dedupstream-0.trace"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("timed-span output %s: %v (size %d)", f, err, sizeOf(st))
		}
	}
	for _, r := range rs {
		if !r.Valid || r.Case != CaseE2EEmbedded || r.Records != 20_000 || r.RecordsPerSec <= 0 {
			t.Errorf("%s: %+v", r.System, r)
		}
		switch r.System {
		case SysCopy:
			if r.Correct.Emitted != 20_000 {
				t.Errorf("copy job wrote %d records, want 20000", r.Correct.Emitted)
			}
		case SysDedup:
			if want := uint64(float64(20_000) * (1 - r.DupRatio)); r.Correct.Emitted != r.Correct.Expected || r.Correct.Expected+1 < want || r.Correct.Expected > want+1 {
				t.Errorf("job emitted %d of %d expected (dup ratio %.3f)", r.Correct.Emitted, r.Correct.Expected, r.DupRatio)
			}
		default:
			t.Errorf("unexpected system %q", r.System)
		}
	}
}

func sizeOf(st os.FileInfo) int64 {
	if st == nil {
		return -1
	}
	return st.Size()
}
