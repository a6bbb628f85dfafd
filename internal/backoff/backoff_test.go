package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelayDoublesWithJitterUpToLimit(t *testing.T) {
	for attempt, ceil := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 6: 32 * time.Second, 40: 32 * time.Second} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := Delay(time.Second, 32*time.Second, attempt)
			if d < ceil/2 || d > ceil {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, ceil/2, ceil)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("attempt %d: only %d distinct waits, want jitter", attempt, len(seen))
		}
	}
}

func TestBackoffResetAndSleep(t *testing.T) {
	b := Backoff{Base: time.Millisecond, Limit: time.Second}
	for range 5 {
		b.Wait()
	}
	if d := b.Wait(); d < 16*time.Millisecond {
		t.Fatalf("6th wait %v, want >= 16ms", d)
	}
	b.Reset()
	if d := b.Wait(); d > time.Millisecond {
		t.Fatalf("wait after Reset %v, want <= 1ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep on a cancelled context: %v", err)
	}
}
