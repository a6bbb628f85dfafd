package job_test

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestoreFutureRecord: a record stamped more than max_future_skew
// ahead of the wall clock (a producer whose clock is wrong) counts as now
// on the stage clock: it moves the clock to the wall clock of its
// decision. A restore that reads it back later, after the job stood still
// for longer than the window with no newer input, must not move the clock
// to the wall clock of the restore: that expired every key emitted in the
// window before it, which the stage that emitted them still held, and
// their replays passed; and it filed the keys restored with it in the
// restore's generation, so that a later record of theirs, past the window
// on the clock the stage kept, was dropped (lost).
//
// Partition 0, window 1h (generations of 15m), W = the wall clock of the
// first run: key "a" stamped W-10m is emitted and committed, then key "f"
// stamped W+10 days or W+115m (clock W: both are more than 5m ahead). The second run's wall clock is W+2h; its
// first record is a replay of "a" stamped W-5m, 10 minutes after "a" on
// the stage clock of the run that emitted it (a repeat), then a record of
// "a" stamped W+90m, 100 minutes after it (past the window: kept).
//
//   - "stopped cleanly": the store is kept whole; the replay meets it
//     (the control: no restore).
//   - "kill -9 after the commit": the stage dies after the transaction of
//     the cycle holding "f" committed, before its store commit (failpoint
//     Committed), so the recovery restores "f" from the output.
//   - "state removed": the state directory is lost; the new store is
//     rebuilt from the output's window.
//
// Stamped W+115m, "f" is no longer ahead of the second run's clock: only
// the generation marks past it (the commit's, marks.go) tell that it was
// counted as W, not as its stamp.
func TestRestoreFutureRecord(t *testing.T) {
	W := time.Now().Truncate(time.Millisecond)
	ids := keysOn(0, 2)
	a, f := ids[0], ids[1]
	type run struct {
		name        string
		kill        bool
		removeState bool
		ahead       time.Duration // how far ahead of W "f" is stamped
	}
	var runs []run
	for _, ahead := range []struct {
		name string
		d    time.Duration
	}{{"10 days ahead", 10 * 24 * time.Hour}, {"115m ahead, behind the second run's clock", 115 * time.Minute}} {
		runs = append(runs,
			run{ahead.name + ", stopped cleanly", false, false, ahead.d},
			run{ahead.name + ", kill -9 after the commit", true, false, ahead.d},
			run{ahead.name + ", state removed", false, true, ahead.d})
	}
	for _, tc := range runs {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if e.cluster == nil {
				// A real broker refuses records stamped more than
				// message.timestamp.after.max.ms ahead (1h by default
				// since Kafka 4.0): these topics take any stamp, as a
				// topic fed by producers whose clocks are wrong may.
				for _, topic := range []string{e.raw, e.out} {
					setTopicConfig(t, e, topic, "message.timestamp.after.max.ms", "9223372036854775807")
				}
			}
			rec := func(id string, ts time.Time, msg int) *kgo.Record {
				return &kgo.Record{Topic: e.raw, Partition: 0, Key: []byte(id), Timestamp: ts,
					Value: fmt.Appendf(nil, `{"order_id":%q,"msg":%d}`, id, msg)}
			}
			cfg := e.config("0, 1, 2, 3")
			cfg.Dedup.Window = time.Hour
			// "a" is committed by a run stopped cleanly, so that the
			// failpoint below cannot take its cycle: armed after
			// waitCommitted, it took it now and then on the real cluster,
			// whose offsets are visible before the EndTxn answer (the
			// second run then restored nothing).
			e.produce([]*kgo.Record{rec(a, W.Add(-10*time.Minute), 1)})
			e.runToEnd(cfg)
			var opts []func(*job.Options)
			var died <-chan struct{}
			if tc.kill {
				var crash func(*job.Options)
				crash, died = crashAtFirstCommit() // f's cycle
				opts = append(opts, crash)
			}
			r1 := e.start(cfg, opts...)
			e.produce([]*kgo.Record{rec(f, W.Add(tc.ahead), 1)})
			if tc.kill {
				e.waitDied(died)
			} else {
				e.waitCommitted(r1, 1, 60*time.Second)
			}
			e.stop(r1)
			if tc.removeState {
				if err := os.RemoveAll(cfg.State.Dir); err != nil {
					t.Fatal(err)
				}
			}

			e.produce([]*kgo.Record{rec(a, W.Add(-5*time.Minute), 2), rec(a, W.Add(90*time.Minute), 3)})
			r2 := e.start(cfg, func(o *job.Options) {
				o.Clock = func() time.Time { return time.Now().Add(2 * time.Hour) }
			})
			e.waitCommitted(r2, 1, 60*time.Second)
			e.stop(r2)
			if restored := r2.job.Stats().Restored; (restored > 0) != (tc.kill || tc.removeState) {
				t.Errorf("the second run restored %d records", restored)
			}
			out, _ := e.readOutput()
			var msgs []string
			for _, r := range out {
				if string(r.Key) == a {
					msgs = append(msgs, string(r.Value))
					t.Logf("output offset %d: %s stamped W%+v: %s", r.Offset, r.Key, r.Timestamp.Sub(W), r.Value)
				}
			}
			want := []string{fmt.Sprintf(`{"order_id":%q,"msg":1}`, a), fmt.Sprintf(`{"order_id":%q,"msg":3}`, a)}
			if !slices.Equal(msgs, want) {
				t.Errorf("key %q in the output: %q; want msg 1 and msg 3: msg 2 came 5m after msg 1 on the stage clock (a repeat), msg 3 100m after it (past the window)", a, msgs)
			}
		})
	}
}
