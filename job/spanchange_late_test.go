package job_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSpanChangeLateRecords: dedup.window changed between two runs (a new
// generation span), after a record that is not in the output (a poison
// record, a dropped repeat) moved the stage clock ahead of a late record
// that was emitted. The span change removes the stores, and the recovery
// rebuilds them from the output's window. The generation marks committed
// with the offsets say where the clock was when the late key was emitted
// (marks.go), but they count in the old span; the rebuilt store must still
// hold the late key, so that its replay, minutes after the clock it was
// emitted at (inside the old and the new window alike), is dropped. Read
// back with kgo, the late key must be in the output once.
//
// Partition 0, generations 4, T = six hours ago.
//
//   - window 1h to 2h: a poison record stamped T+60m moves the clock, the
//     late key stamped T-3h is emitted at clock T+60m, then "newer"
//     stamped T+70m; the replay of the late key is stamped T+71m. The new
//     store's restore starts at the first output record stamped after
//     T+70m - (2h + 30m + 5m) = T-85m, past the late record.
//   - window 1h to 40m: a repeat stamped T+60m of a key first emitted at
//     T+10m is dropped and moves the clock, the late key stamped T is
//     emitted at clock T+60m, then "newer" stamped T+70m; the replay is
//     stamped T+71m. The restore starts after T+70m - (40m + 10m + 5m) =
//     T+15m, past the late record.
//
// Without the marks of the old span the restore filed only the output
// stamped inside the new window, and the replay of the late key passed:
// "key ... is 2 times in the output".
func TestSpanChangeLateRecords(t *testing.T) {
	T := time.Now().Add(-6 * time.Hour).Truncate(time.Millisecond)
	ids := keysOn(0, 3)
	late, newer, early := ids[0], ids[1], ids[2]
	rec := orderAt("", T)
	poison := poisonAt("", T.Add(60*time.Minute))
	for _, tc := range []struct {
		name      string
		moveClock []*kgo.Record
		lateAt    time.Duration
		window    time.Duration // of the second run
	}{
		{"window 1h to 2h, poison record", []*kgo.Record{poison}, -3 * time.Hour, 2 * time.Hour},
		{"window 1h to 40m, dropped repeat", []*kgo.Record{rec(early, 10*time.Minute, 1), rec(early, 60*time.Minute, 2)}, 0, 40 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			first := append(append([]*kgo.Record{}, tc.moveClock...), rec(late, tc.lateAt, 1), rec(newer, 70*time.Minute, 1))
			for _, r := range first {
				r.Topic = e.raw
			}
			cfg := e.config("0, 1, 2, 3")
			cfg.Dedup.Window = time.Hour
			e.produce(first)
			e.runToEnd(cfg)

			replay := rec(late, 71*time.Minute, 2)
			replay.Topic = e.raw
			e.produce([]*kgo.Record{replay})
			cfg2 := e.config("0, 1, 2, 3")
			cfg2.Dedup.Window = tc.window
			r2 := e.runToEnd(cfg2)
			if n := r2.job.Stats().StatesDropped; n == 0 {
				t.Fatalf("the second start kept the stores: the span change was not seen")
			}

			if n := e.outputOf(late, T); n != 1 {
				t.Errorf("key %q is %d times in the output, want once: emitted at clock T+60m, its replay 11m later on the stage clock", late, n)
			}
		})
	}
}
