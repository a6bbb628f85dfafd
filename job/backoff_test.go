package job

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := newBackoff(time.Second, 32*time.Second)
	for round := range 2 {
		for i, ceil := range []time.Duration{1, 2, 4, 8, 16, 32, 32, 32} {
			ceil *= time.Second
			if d := b.wait(); d < ceil/2 || d > ceil {
				t.Fatalf("round %d, wait %d: %v, want in [%v, %v]", round, i, d, ceil/2, ceil)
			}
		}
		b.reset()
	}
	// Jitter: waits at one step are not all equal.
	seen := map[time.Duration]bool{}
	for range 20 {
		b.reset()
		seen[b.wait()] = true
	}
	if len(seen) < 2 {
		t.Error("backoff has no jitter")
	}
}
