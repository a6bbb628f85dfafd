package job_test

import (
	"os"
	"testing"
	"time"
)

// TestOffsetsReset is the operator's replay: the job stops, its group's
// input offsets go back to the start with the Kafka tooling
// (kafka-consumer-groups.sh --reset-offsets --to-earliest: committed outside
// any generation, with empty metadata, so without the job's partitions= and
// output= marks), and the job starts again. Every record it reads again is a
// repeat of a key already in the output, so it must emit nothing, whether it
// kept its stores or restores them from the output. The DLQ is not
// deduplicated: poison records have no business key, so each one read again
// is dead-lettered again.
func TestOffsetsReset(t *testing.T) {
	for _, tc := range []struct {
		name        string
		removeState bool
	}{
		{"state kept", false},
		{"state removed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			w := e.workload(11, 3_000, 800)
			e.produce(w.Records)
			cfg := e.config("0, 1, 2, 3")
			e.runToEnd(cfg)

			zero := map[int32]int64{}
			for p := range int32(partitions) {
				zero[p] = 0
			}
			if err := e.prod.ResetOffsets(e.ctx(10*time.Second), e.jobID, e.raw, zero); err != nil {
				t.Fatal(err)
			}
			if c, err := e.prod.Committed(e.ctx(10*time.Second), e.jobID, e.raw, partitions); err != nil || len(c) != partitions || c[0] != 0 {
				t.Fatalf("offsets after the reset: %v (%v), want 0 on every partition", c, err)
			}
			if tc.removeState {
				if err := os.RemoveAll(cfg.State.Dir); err != nil {
					t.Fatal(err)
				}
			}
			r2 := e.runToEnd(cfg)

			st := r2.job.Stats()
			if st.In < uint64(len(w.Records)-w.Poison) || st.Emitted != 0 {
				t.Errorf("after the reset the job read %d records (want all %d again) and emitted %d (want 0): %+v", st.In, len(w.Records), st.Emitted, st)
			}
			if tc.removeState && st.Restored == 0 {
				t.Errorf("the removed stores were not restored from the output: %+v", st)
			}
			out, dlq := e.readOutput()
			if len(dlq) != 2*w.Poison {
				t.Errorf("DLQ holds %d records, want each of the %d poison records twice (read twice)", len(dlq), w.Poison)
			}
			rep := w.Check(out, dlq[:min(len(dlq), w.Poison)])
			for _, p := range rep.Problems {
				t.Error(p)
			}
			t.Logf("out=%d (unique keys %d) dlq=%d escaped=%d lost=%d; second run %+v", rep.Out, len(w.First), len(dlq), rep.Escaped, rep.Lost, st)
		})
	}
}
