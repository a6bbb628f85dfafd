package job_test

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestStateFromOlderBackup: the state directory is replaced by a copy taken
// one run earlier (a backup restored after a disk was lost): its stores'
// checkpoints lie behind the committed output and offsets. Alone, or with
// the group's offsets moved back to the start of the input with the Kafka
// tooling meanwhile (a replay), the next run must restore what the copy
// lacks from the output: replays of keys of both runs are then all
// dropped (read back with kgo).
func TestStateFromOlderBackup(t *testing.T) {
	for _, reset := range []bool{false, true} {
		name := "offsets kept"
		if reset {
			name = "offsets reset to the start"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			w := e.workload(71, 3_000, 1_500)
			firsts := w.Records[:len(w.Records)-1_500]
			half := len(firsts) / 2
			cfg := e.config("0, 1, 2, 3")
			e.produce(firsts[:half])
			e.runToEnd(cfg)
			backup := t.TempDir()
			if err := os.CopyFS(backup, os.DirFS(cfg.State.Dir)); err != nil {
				t.Fatal(err)
			}
			e.produce(firsts[half:])
			e.runToEnd(cfg)

			if err := os.RemoveAll(cfg.State.Dir); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(cfg.State.Dir, os.DirFS(backup)); err != nil {
				t.Fatal(err)
			}
			if reset {
				zero := map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0}
				if err := e.prod.ResetOffsets(e.ctx(10*time.Second), e.jobID, e.raw, zero); err != nil {
					t.Fatal(err)
				}
			}
			e.produce(w.Records[len(firsts):]) // replays of the earliest keys of both runs
			r := e.runToEnd(cfg)
			if st := r.job.Stats(); st.Restored == 0 || st.Emitted != 0 {
				t.Errorf("the run on the older copy restored %d output records and emitted %d, want > 0 and 0", st.Restored, st.Emitted)
			}
			rep, err := w.Verify(e.ctx(60*time.Second), e.brokers, e.out, e.dlq, partitions, e.clientOpts...)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range rep.Problems {
				if reset && strings.HasPrefix(p, "DLQ holds") {
					// Poison records have no key to deduplicate by: each
					// one read again is dead-lettered again (scaling.md).
					continue
				}
				t.Error(p)
			}
			t.Logf("in=%d out=%d escaped=%d lost=%d", rep.In, rep.Out, rep.Escaped, rep.Lost)
		})
	}
}
