package job

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is exponential backoff with jitter: the n-th wait in a row is
// drawn uniformly from [d/2, d] with d = min(base*2^n, limit), so that
// stages failing together do not retry in lockstep.
type backoff struct {
	base, limit time.Duration
	next        time.Duration
}

func newBackoff(base, limit time.Duration) *backoff {
	return &backoff{base: base, limit: limit, next: base}
}

// wait returns the next wait and doubles the one after.
func (b *backoff) wait() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.limit)
	return d/2 + rand.N(d/2+1)
}

// reset starts over at base after a success.
func (b *backoff) reset() { b.next = b.base }

// sleep waits for the next wait or until ctx ends.
func (b *backoff) sleep(ctx context.Context) error {
	t := time.NewTimer(b.wait())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
