package job

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/pipeline"
)

// TestSettleDoubt: a cycle whose EndTxn(commit) failed ambiguously is
// counted exactly when the group's committed offsets are the ones it sent
// (its transaction committed; its input is not read again), and the doubt
// is forgotten either way. One that had not committed after being open
// longer than the transaction timeout (plus the commit interval before its
// first request) is said to be the coordinator's timeout abort, with a
// warning; each outcome is counted in dedupstream_ambiguous_commits_total.
func TestSettleDoubt(t *testing.T) {
	const timeout, interval = 3 * time.Second, 100 * time.Millisecond
	cycle := Stats{Counts: pipeline.Counts{In: 10, Emitted: 6, DroppedBatch: 3, DeadLettered: 1}}
	timedOut := "its transaction stayed open past the transaction timeout"
	for _, tc := range []struct {
		name      string
		sent      []int64
		committed []int64
		openFor   time.Duration
		counted   bool
		outcome   int // -1: none counted
		says      string
	}{
		{"committed", []int64{120, 40}, []int64{120, 40}, time.Second, true, ambiguousCommitted, "had committed"},
		{"committed after a standstill", []int64{120, 40}, []int64{120, 40}, time.Minute, true, ambiguousCommitted, "had committed"},
		{"aborted", []int64{120, 40}, []int64{100, 40}, time.Second, false, ambiguousAborted, "had not committed; its input is read again"},
		{"aborted, open just under timeout+interval", []int64{120, 40}, []int64{100, 40}, timeout + interval - time.Millisecond, false, ambiguousAborted, "had not committed; its input is read again"},
		{"aborted by the timeout", []int64{120, 40}, []int64{100, 40}, timeout + interval, false, ambiguousTimedOut, timedOut},
		{"aborted after a long standstill", []int64{120, 40}, []int64{100, -1}, 16 * time.Second, false, ambiguousTimedOut, timedOut},
		{"topic not read in the cycle", []int64{120, -2}, []int64{120, -1}, time.Second, true, ambiguousCommitted, "had committed"},
		{"offsets of another shape", []int64{120}, []int64{120, 40}, time.Second, false, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.Config{}
			cfg.Kafka.TransactionTimeout, cfg.Commit.Interval = timeout, interval
			j := &Job{cfg: cfg}
			var logs bytes.Buffer
			r := &runner{j: j, log: slog.New(slog.NewTextHandler(&logs, nil)), met: newStageMetrics(j, 0, func(string, ...any) {})}
			r.doubt = &doubtfulCycle{pos: tc.sent, cycle: cycle, openFor: tc.openFor}
			r.settleDoubt(tc.committed)
			got := r.j.Stats()
			want := uint64(0)
			if tc.counted {
				want = 10
			}
			if got.In != want || (tc.counted && (got.Emitted != 6 || got.Cycles != 1)) {
				t.Errorf("after settling: %+v; want the cycle counted: %v", got, tc.counted)
			}
			if r.doubt != nil {
				t.Error("the doubt was not forgotten")
			}
			var wantOutcomes [ambiguousOutcomes]uint64
			if tc.outcome >= 0 {
				wantOutcomes[tc.outcome] = 1
			}
			if o := r.met.pm.ambiguous; o != wantOutcomes {
				t.Errorf("ambiguous commits by outcome %v, want %v", o, wantOutcomes)
			}
			if out := logs.String(); tc.says != "" && !strings.Contains(out, tc.says) ||
				tc.says == "" && out != "" || tc.says != timedOut && strings.Contains(out, timedOut) {
				t.Errorf("logged %q, want a line saying %q", out, tc.says)
			}
			r.settleDoubt(tc.committed)
			if again := r.j.Stats(); again.In != got.In || r.met.pm.ambiguous != wantOutcomes {
				t.Errorf("a second settle counted again: %+v %v", again, r.met.pm.ambiguous)
			}
		})
	}
}
