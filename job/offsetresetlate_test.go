package job_test

import (
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOffsetResetLateRecords: the operator replays the input as
// docs/scaling.md says (stop, reset the group's offsets to the earliest
// with the Kafka tooling, start on the kept stores), and some time later
// a partition's state directory is lost. The tooling commits offsets
// without metadata, so the generation marks committed with the output
// (marks.go) are gone; the replay run drops every record, so it has no
// marks of its own to commit. Without another copy the store
// rebuilt after the loss then restored by the output's timestamps, and a
// late key emitted after a poison record moved the clock (as in
// TestRestoreWindowLateRecords) lies before the restore's start: its
// replay, 41m after the clock it was emitted at (window 1h), passed. The
// store's checkpoint keeps a copy of the marks (version 5): the replay
// run's recovery takes it, and its commit writes the marks back with the
// offsets, where the rebuilt store finds them. Planted (the recovery not
// taking the store's marks): "key late-4 is 2 times in the output".
func TestOffsetResetLateRecords(t *testing.T) {
	e, T, rec, cfg := lateEnv(t)
	ids := keysOn(0, 2)
	late, newer := ids[0], ids[1]
	e.produce([]*kgo.Record{
		poisonAt(e.raw, T.Add(60*time.Minute)),
		rec(late, 0, 1), rec(newer, 100*time.Minute, 1)})
	e.runToEnd(cfg)

	zero := map[int32]int64{}
	for p := range int32(partitions) {
		zero[p] = 0
	}
	if err := e.prod.ResetOffsets(e.ctx(10*time.Second), e.jobID, e.raw, zero); err != nil {
		t.Fatal(err)
	}
	if st := e.runToEnd(cfg).job.Stats(); st.Emitted != 0 {
		t.Fatalf("the replay emitted %d records, want 0", st.Emitted)
	}
	e.replayLate(cfg, rec, late, T, true)
}

// TestOffsetResetTailLateRecords: as above, but the stage died after the
// transaction of its last cycle committed and before its store commit
// (failpoint Committed) before the reset, so the store's marks end where
// its checkpoint does, before that cycle's record (stamped T+50m, in a
// generation three or more after the store's newest mark). The replay run
// restores the record by its timestamp and must write back marks that say
// no less: marks claiming it was emitted in the generation of the store's
// newest mark made the store rebuilt later count it at that generation's
// end (emitTimes), where it expired before its replay 30m later on the
// stage clock (window 1h), which then passed. Planted (the restore noting
// no marks past the store's checkpoint, tailMarks): "key late-7 is 2 times
// in the output".
func TestOffsetResetTailLateRecords(t *testing.T) {
	e, T, rec, cfg := lateEnv(t)
	ids := keysOn(0, 2)
	warm, tail := ids[0], ids[1]
	// The store gets a checkpoint with a mark. A clean stop, so that the
	// failpoint below cannot take this cycle: its offsets are visible
	// before its store commit.
	e.produce([]*kgo.Record{rec(warm, 0, 1)})
	e.runToEnd(cfg)
	crash, died := crashAtFirstCommit() // the tail's cycle
	r1 := e.start(cfg, crash)
	e.produce([]*kgo.Record{rec(tail, 50*time.Minute, 1)})
	e.waitDied(died)
	e.stop(r1)

	zero := map[int32]int64{}
	for p := range int32(partitions) {
		zero[p] = 0
	}
	if err := e.prod.ResetOffsets(e.ctx(10*time.Second), e.jobID, e.raw, zero); err != nil {
		t.Fatal(err)
	}
	if st := e.runToEnd(cfg).job.Stats(); st.Emitted != 0 || st.Restored == 0 {
		t.Fatalf("the replay run emitted %d records and restored %d, want 0 and the record past the store's checkpoint", st.Emitted, st.Restored)
	}

	if err := os.RemoveAll(cfg.State.Dir); err != nil {
		t.Fatal(err)
	}
	e.produce([]*kgo.Record{rec(tail, 80*time.Minute, 2)})
	e.runToEnd(cfg)
	if n := e.outputOf(tail, T); n != 1 {
		t.Errorf("key %q is %d times in the output, want once: emitted at clock T+50m, its replay 30m later on the stage clock", tail, n)
	}
}
