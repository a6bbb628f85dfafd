package harness

import (
	"strings"
	"testing"
	"time"
)

// burn spins until the process has used d more CPU.
func burn(d time.Duration) {
	end := selfCPU() + d.Seconds()
	x := 1
	for selfCPU() < end {
		for i := range 10_000 {
			x = x*31 + i
		}
	}
	burnt = x
}

var burnt int // keeps burn's loop

// TestSpanCPUCountsWhereTheWorkFalls puts known amounts of CPU inside a
// stage call, between calls and after the span (a goroutine still busy,
// as the store's merger can be): each must land in its own bucket.
func TestSpanCPUCountsWhereTheWorkFalls(t *testing.T) {
	s := startSpan()
	s.enter()
	burn(150 * time.Millisecond)
	s.leave()
	burn(60 * time.Millisecond)
	s.enter()
	burn(150 * time.Millisecond)
	s.leave()
	done := make(chan struct{})
	go func() { // owed work that outlives the timed records
		burn(300 * time.Millisecond)
		close(done)
	}()
	s.settle(10 * time.Second)
	<-done
	within := func(what string, got, want, slack float64) {
		t.Helper()
		if got < want || got > want+slack {
			t.Errorf("%s: %.3f s of CPU, want %.3f to %.3f", what, got, want, want+slack)
		}
	}
	within("stage", s.stage, 0.300, 0.05)
	within("between", s.between, 0.060, 0.05)
	within("tail", s.tail, 0.250, 0.1)
	if s.tailWall < 250*time.Millisecond {
		t.Errorf("settled after %v, before the goroutine's work was done", s.tailWall)
	}
	if r := s.String(1_000_000); !strings.HasPrefix(r, "0.3") || !strings.Contains(r, "per record in the stage's calls, 0.0") {
		t.Errorf("report per record of 1M: %q", r)
	}
}

// TestSettleStopsWhenQuiet: with nothing running after the span, settle
// returns after one poll.
func TestSettleStopsWhenQuiet(t *testing.T) {
	s := startSpan()
	s.settle(10 * time.Second)
	if s.tailWall > 10*quietPoll || s.tail > quietShare*quietPoll.Seconds()*10 {
		t.Errorf("quiet process: settled after %v with %.3f s of CPU", s.tailWall, s.tail)
	}
}
