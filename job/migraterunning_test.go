package job_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/statestore"
)

// TestMigrateRefusedWhileRunning: `dedupstream migrate` run while an
// instance still runs on the same state directory (the operator skipped
// "stop every instance") removes nothing and says what to do; the running
// instance goes on undisturbed and exactly once. Once it is stopped,
// migrate runs.
func TestMigrateRefusedWhileRunning(t *testing.T) {
	e := newEnv(t)
	w := e.workload(5, 3_000, 800)
	half := len(w.Records) / 2
	cfg, r := e.runningOn(w.Records[:half])

	opts := job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second}
	_, err := job.Migrate(e.ctx(60*time.Second), cfg, opts)
	if !errors.Is(err, statestore.ErrLocked) || !strings.Contains(err.Error(), "stop every instance") {
		t.Fatalf("migrate while an instance runs: %v, want a refusal naming the open state and what to do", err)
	}
	t.Logf("migrate refused: %v", err)

	e.produce(w.Records[half:])
	e.waitCommitted(r, 1, 45*time.Second)
	e.stop(r)
	e.verify(w, r.job.Stats())

	if _, err := job.Migrate(e.ctx(60*time.Second), cfg, opts); err != nil {
		t.Fatalf("migrate after the instance stopped: %v", err)
	}
}
