package job

import (
	"log/slog"
	"testing"

	"github.com/dedupstream/dedupstream/pipeline"
)

// TestSettleDoubt: a cycle whose EndTxn(commit) failed ambiguously is
// counted exactly when the group's committed offsets are the ones it sent
// (its transaction committed; its input is not read again), and the doubt
// is forgotten either way.
func TestSettleDoubt(t *testing.T) {
	cycle := Stats{Counts: pipeline.Counts{In: 10, Emitted: 6, DroppedBatch: 3, DeadLettered: 1}}
	for _, tc := range []struct {
		name      string
		sent      []int64
		committed []int64
		counted   bool
	}{
		{"committed", []int64{120, 40}, []int64{120, 40}, true},
		{"aborted", []int64{120, 40}, []int64{100, 40}, false},
		{"topic not read in the cycle", []int64{120, -2}, []int64{120, -1}, true},
		{"offsets of another shape", []int64{120}, []int64{120, 40}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &Job{}
			r := &runner{j: j, log: slog.New(slog.DiscardHandler), met: newStageMetrics(j, 0, func(string, ...any) {})}
			r.doubt = &doubtfulCycle{pos: tc.sent, cycle: cycle}
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
			r.settleDoubt(tc.committed)
			if again := r.j.Stats(); again.In != got.In {
				t.Errorf("a second settle counted again: %+v", again)
			}
		})
	}
}
