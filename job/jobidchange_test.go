package job_test

import (
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
)

// TestJobIDChanged: the documented way to rename a job (docs/scaling.md,
// "job.id is the job's identity"): every instance under the old id stops,
// then the job starts under the new id, with its state directories kept or
// lost. The new id has no committed offsets, so it reads from its stores'
// checkpoints (or, without stores, from the input's start); either way
// every replay meets a key the output already holds and is dropped.
func TestJobIDChanged(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepState bool
	}{{"state kept", true}, {"state lost", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			w := e.workload(17, 2_000, 600)
			half := len(w.Records) / 2
			e.produce(w.Records[:half])
			cfg := e.config("0, 1, 2, 3")
			r1 := e.runToEnd(cfg)

			e.jobID = kafkatest.TopicName("orders-dedup-renamed")
			cfg2 := e.config("0, 1, 2, 3")
			if tc.keepState {
				cfg2.State.Dir = cfg.State.Dir
			} else {
				cfg2.State.Dir += "-new"
			}
			e.produce(w.Records[half:])
			r2 := e.runToEnd(cfg2)
			// Without stores the new id reads the input from its start, so
			// the DLQ gets the first half's poison records again; the output
			// is what is checked.
			out, dlq := e.readOutput()
			rep := w.Check(out, dlq)
			for _, p := range rep.Problems {
				if !strings.HasPrefix(p, "DLQ") {
					t.Error(p)
				}
			}
			if rep.Out != len(w.First) {
				t.Errorf("output holds %d records, want one per key (%d)", rep.Out, len(w.First))
			}
			t.Logf("out=%d keys=%d escaped=%d lost=%d; runs %+v / %+v", rep.Out, len(w.First), rep.Escaped, rep.Lost, r1.job.Stats().Counts, r2.job.Stats().Counts)
		})
	}
}
