// Package backoff computes retry waits: exponential with jitter, so that
// stages and clients failing together do not retry in lockstep.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Delay is the wait before retry attempt n (1-based): base doubled per
// attempt and capped at limit gives d, and the wait is drawn uniformly from
// [d/2, d].
func Delay(base, limit time.Duration, attempt int) time.Duration {
	d := base << min(max(attempt-1, 0), 30)
	if d <= 0 || d > limit {
		d = limit
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d, or until ctx ends and then returns its error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Backoff counts consecutive failures: each Wait is the Delay of the next
// attempt, and Reset after a success starts over at base.
type Backoff struct {
	Base, Limit time.Duration
	attempt     int
}

// Wait returns the wait before the next attempt.
func (b *Backoff) Wait() time.Duration {
	b.attempt++
	return Delay(b.Base, b.Limit, b.attempt)
}

// Reset starts over at Base.
func (b *Backoff) Reset() { b.attempt = 0 }

// Sleep waits for the next attempt or until ctx ends.
func (b *Backoff) Sleep(ctx context.Context) error { return Sleep(ctx, b.Wait()) }
