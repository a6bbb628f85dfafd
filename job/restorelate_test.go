package job_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestoreWindowLateRecords: on record time the stage clock is the
// largest timestamp of the records decided so far, those dropped and
// dead-lettered included, and a key is remembered from the clock it was
// emitted at, not from its own timestamp (a late record's key is kept a
// whole window from the clock). A store rebuilt from nothing (state
// directory lost, a new instance) must restore such a key too: a late
// record emitted after the clock was moved by a record that is not in the
// output has a timestamp before the window's cutoff and an offset before
// the first record stamped after it. The generation marks committed with
// the offsets (marks.go) start the restore at the oldest live
// generation's first output record and file the key in the generation it
// was emitted in. Without them (restoring from the first record stamped
// inside the window, filing by timestamps) the rebuilt store skipped it and
// its replay passed: "key late-4 is 2 times in the output" in both
// state-removed cases.
//
// Partition 0, window 1h (generations of 15m), T = three hours ago:
// first a record stamped T+60m that moves the clock without an output
// record (a poison record, or a repeat of an earlier key), then the late
// key "late" stamped T (emitted at clock T+60m), then "new" stamped
// T+100m. The replay of "late" comes 1m after "new": 41m after the clock
// it was emitted at.
func TestRestoreWindowLateRecords(t *testing.T) {
	T := time.Now().Add(-3 * time.Hour).Truncate(time.Millisecond)
	ids := keysOn(0, 3)
	rec := orderAt("", T)
	late, newer, early := ids[0], ids[1], ids[2]
	for _, tc := range []struct {
		name        string
		moveClock   []*kgo.Record
		removeState bool
	}{
		{"poison record, state kept", []*kgo.Record{poisonAt("", T.Add(60*time.Minute))}, false},
		{"poison record, state removed", []*kgo.Record{poisonAt("", T.Add(60*time.Minute))}, true},
		{"dropped repeat, state removed", []*kgo.Record{rec(early, 10*time.Minute, 1), rec(early, 60*time.Minute, 2)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			first := append(tc.moveClock, rec(late, 0, 1), rec(newer, 100*time.Minute, 1))
			for _, r := range first {
				r.Topic = e.raw
			}
			cfg := e.config("0, 1, 2, 3")
			cfg.Dedup.Window = time.Hour
			e.produce(first)
			e.runToEnd(cfg)
			e.replayLate(cfg, rec, late, T, tc.removeState)
		})
	}
}

// TestRestoreTailLateRecords is the same after a crash with the state
// kept: the stage dies after the transaction of the cycle holding the
// poison record (stamped T+60m) and the late key (stamped T) committed and
// before its store commit (failpoint Committed, as kill -9 with the
// store's commit lost). The recovery restores that cycle from the output,
// where only the late record is; its key must go into the generation of
// T+60m, where the clock was, so that the replay stamped T+101m is dropped
// as it is in the same run without the crash (the test above, "poison
// record, state kept"). Filed by its own timestamp (the restore without
// the marks' clock moves) the record stamped T+100m expired it and the
// replay passed.
func TestRestoreTailLateRecords(t *testing.T) {
	e, T, rec, cfg := lateEnv(t)
	ids := keysOn(0, 3)
	late, newer, warm := ids[0], ids[1], ids[2]
	// The store gets a checkpoint. A clean stop, so that the failpoint
	// below cannot take this cycle: its offsets are visible before its
	// store commit (armed after waitCommitted, it took it about 1 run in 8
	// under -race, and the second run then restored nothing).
	e.produce([]*kgo.Record{rec(warm, time.Minute, 1)})
	e.runToEnd(cfg)
	crash, died := crashAtFirstCommit() // the tail's cycle
	r1 := e.start(cfg, crash)
	e.produce([]*kgo.Record{poisonAt(e.raw, T.Add(60*time.Minute)), rec(late, 0, 1)})
	e.waitDied(died)
	e.stop(r1)

	e.produce([]*kgo.Record{rec(newer, 100*time.Minute, 1), rec(late, 101*time.Minute, 2)})
	r2 := e.start(cfg)
	e.waitCommitted(r2, 1, 60*time.Second)
	e.stop(r2)
	if r2.job.Stats().Restored == 0 {
		t.Fatalf("the second run restored nothing: %+v", r2.job.Stats())
	}
	if n := e.outputOf(late, T); n != 1 {
		t.Errorf("key %q is %d times in the output, want once: emitted at clock T+60m, its replay 41m later on the stage clock", late, n)
	}
}

// lateEnv is the start of the late-record tests: an environment, T three
// hours ago, the maker of records on partition 0 of its raw topic stamped
// T+at (orderAt), and a config of every partition with a window of 1h
// (generations of 15m).
func lateEnv(t *testing.T) (e *env, T time.Time, rec func(id string, at time.Duration, msg int) *kgo.Record, cfg *config.Config) {
	T = time.Now().Add(-3 * time.Hour).Truncate(time.Millisecond)
	e = newEnv(t)
	cfg = e.config("0, 1, 2, 3")
	cfg.Dedup.Window = time.Hour
	return e, T, orderAt(e.raw, T), cfg
}

// replayLate is the last step of the late-record tests: it removes the
// state directory when removeState, produces the replay of key late
// stamped T+101m and runs the job on it. The key must then be in the
// output once: emitted at clock T+60m, its replay comes 41m later on the
// stage clock (window 1h).
func (e *env) replayLate(cfg *config.Config, rec func(id string, at time.Duration, msg int) *kgo.Record, late string, T time.Time, removeState bool) {
	e.t.Helper()
	if removeState {
		if err := os.RemoveAll(cfg.State.Dir); err != nil {
			e.t.Fatal(err)
		}
	}
	replay := rec(late, 101*time.Minute, 2)
	replay.Topic = e.raw
	e.produce([]*kgo.Record{replay})
	e.runToEnd(cfg)
	if n := e.outputOf(late, T); n != 1 {
		e.t.Errorf("key %q is %d times in the output, want once: emitted at clock T+60m, its replay 41m later on the stage clock", late, n)
	}
}

// orderAt returns a maker of the late-record tests' records: an order of
// key id on partition 0 of topic (empty: set by the caller), stamped T+at,
// whose value carries msg.
func orderAt(topic string, T time.Time) func(id string, at time.Duration, msg int) *kgo.Record {
	return func(id string, at time.Duration, msg int) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: 0, Key: []byte(id), Timestamp: T.Add(at),
			Value: fmt.Appendf(nil, `{"order_id":%q,"msg":%d}`, id, msg)}
	}
}

// poisonAt returns a record of partition 0 of topic (empty: set by the
// caller) stamped at that no business key can be taken from: it moves the
// stage clock on record time without an output record.
func poisonAt(topic string, at time.Time) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: 0, Key: []byte("p"), Value: []byte("not json"), Timestamp: at}
}

// outputOf reads the output read_committed with kgo and returns how many
// of its records have the Kafka key key, logging each with its time from
// T.
func (e *env) outputOf(key string, T time.Time) (n int) {
	e.t.Helper()
	out, _ := e.readOutput()
	for _, r := range out {
		if string(r.Key) == key {
			n++
			e.t.Logf("output offset %d: %s stamped T+%v: %s", r.Offset, r.Key, r.Timestamp.Sub(T), r.Value)
		}
	}
	return n
}
