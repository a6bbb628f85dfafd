package job_test

import (
	"testing"
	"time"
)

// TestRecoverAfterCommittedCrash: a stage dies right after its transaction
// committed and before its store commit (failpoint Committed; the stage's
// goroutine exits there, leaving the store one cycle behind the output, as
// a crash does). The next run must restore that cycle's keys from the
// checkpoint's output offset: replays of every key are then all dropped.
// Restoring from the last stable offset instead (the cycle skipped) lets
// that cycle's keys through again. The subprocess kill loop of
// cmd/dedupstream covers the same point with real crashes.
func TestRecoverAfterCommittedCrash(t *testing.T) {
	e := newEnv(t)
	w := e.workload(51, 3_000, 3_000)
	firsts := w.Records[:len(w.Records)-3_000]
	half := len(firsts) / 2
	e.produce(firsts[:half])
	cfg := e.config("0, 1, 2, 3")
	// Every store has a checkpoint before the crash: recovery then reads
	// the output from the checkpoint's offset, not the window of a new
	// store. A clean stop, so that the failpoint below cannot take this
	// cycle: its offsets are visible before its store commit, and a
	// failpoint armed after waitCommitted could take it.
	e.runToEnd(cfg)
	crash, died := crashAtFirstCommit() // a cycle of the second half
	r1 := e.start(cfg, crash)
	e.produce(firsts[half:])
	e.waitDied(died)
	time.Sleep(200 * time.Millisecond) // let the other stages run on
	e.stop(r1)

	e.produce(w.Records[len(firsts):])
	r2 := e.start(cfg)
	e.waitCommitted(r2, 1, 60*time.Second)
	e.stop(r2)
	if st := r2.job.Stats(); st.Restored == 0 {
		t.Errorf("the second run restored nothing although a stage died before its store commit: %+v", st)
	}
	rep := e.verifyOutput(w)
	t.Logf("in=%d out=%d escaped=%d lost=%d", rep.In, rep.Out, rep.Escaped, rep.Lost)
}
