package job_test

import (
	"fmt"
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
// (marks.go) are gone; the replay run drops every record and commits
// offsets carrying only the marks of what it emits, none. The store
// rebuilt after the loss then restores by the output's timestamps, and a
// late key emitted after a poison record moved the clock (as in
// TestRestoreWindowLateRecords) lies before the restore's start: its
// replay, 41m after the clock it was emitted at (window 1h), passes.
//
// Known hole, not fixed here: the marks live only in the committed offsets'
// metadata. Keeping them in the store's checkpoint too (and committing the
// checkpoint's marks when the offsets carry none) would carry them across
// a reset made while the stores are kept.
func TestOffsetResetLateRecords(t *testing.T) {
	T := time.Now().Add(-3 * time.Hour).Truncate(time.Millisecond)
	ids := keysOn(0, 2)
	late, newer := ids[0], ids[1]
	e := newEnv(t)
	rec := func(id string, at time.Duration, msg int) *kgo.Record {
		return &kgo.Record{Topic: e.raw, Partition: 0, Key: []byte(id), Timestamp: T.Add(at),
			Value: fmt.Appendf(nil, `{"order_id":%q,"msg":%d}`, id, msg)}
	}
	cfg := e.config("0, 1, 2, 3")
	cfg.Dedup.Window = time.Hour
	e.produce([]*kgo.Record{
		{Topic: e.raw, Partition: 0, Key: []byte("p"), Value: []byte("not json"), Timestamp: T.Add(60 * time.Minute)},
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

	if err := os.RemoveAll(cfg.State.Dir); err != nil {
		t.Fatal(err)
	}
	e.produce([]*kgo.Record{rec(late, 101*time.Minute, 2)})
	e.runToEnd(cfg)
	if n := e.outputOf(late, T); n != 1 {
		t.Errorf("key %q is %d times in the output, want once: emitted at clock T+60m, its replay 41m later on the stage clock", late, n)
	}
}
