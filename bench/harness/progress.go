package harness

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Progress prints progress lines, at most one per Every for Tick.
type Progress struct {
	W     io.Writer
	Every time.Duration
	mu    sync.Mutex
	last  time.Time
	start time.Time
}

// NewProgress prints to w at most every 'every'.
func NewProgress(w io.Writer, every time.Duration) *Progress {
	return &Progress{W: w, Every: every, start: time.Now()}
}

// Tick prints when Every passed since the last line.
func (p *Progress) Tick(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.last) >= p.Every {
		p.last = now
		p.print(now, format, args...)
	}
}

// Say prints always.
func (p *Progress) Say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = time.Now()
	p.print(p.last, format, args...)
}

func (p *Progress) print(now time.Time, format string, args ...any) {
	fmt.Fprintf(p.W, "[%6.1fs] %s\n", now.Sub(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// count prints n with a k/M/G suffix.
func count(n uint64) string {
	switch {
	case n >= 1e9 && n%1e7 == 0:
		return fmt.Sprintf("%gG", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.4gM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.4gk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func rate(n uint64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return count(uint64(float64(n) / d.Seconds()))
}
