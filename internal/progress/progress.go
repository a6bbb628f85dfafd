// Package progress reports the progress of long work (a restore, an audit,
// a demo run): a bar redrawn in place on a terminal, a plain line every few
// seconds otherwise, or a callback (for log lines) at the same pace.
//
// A Progress is driven by its updates: Set and Add check the clock and draw
// when the interval has passed, so there is no goroutine to stop and a stalled
// job prints nothing new. Updates are cheap (an atomic add and a clock read)
// and safe from several goroutines; call them per batch, not per record.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the drawing intervals.
const (
	// LineInterval is the pace of plain lines and callbacks.
	LineInterval = 5 * time.Second
	// BarInterval is the pace of bar redraws on a terminal.
	BarInterval = 200 * time.Millisecond
)

// Snapshot is the state of a Progress at one moment.
type Snapshot struct {
	Label string
	// Done and Total are in the caller's unit (records, offsets); Total is
	// 0 when unknown.
	Done, Total int64
	Elapsed     time.Duration
}

// Fraction is Done/Total in [0, 1], or 0 when Total is unknown.
func (s Snapshot) Fraction() float64 {
	if s.Total <= 0 {
		return 0
	}
	return min(max(float64(s.Done)/float64(s.Total), 0), 1)
}

// Rate is Done per second of Elapsed.
func (s Snapshot) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Done) / s.Elapsed.Seconds()
}

// ETA estimates the time left from the rate so far; 0 when unknown.
func (s Snapshot) ETA() time.Duration {
	r := s.Rate()
	if s.Total <= 0 || r <= 0 || s.Done >= s.Total {
		return 0
	}
	return time.Duration(float64(s.Total-s.Done) / r * float64(time.Second))
}

// String is the plain-line form: "label: 1200/5000 (24.0%), 3100/s, eta 1s".
func (s Snapshot) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d", s.Label, s.Done)
	if s.Total > 0 {
		fmt.Fprintf(&b, "/%d (%.1f%%)", s.Total, 100*s.Fraction())
	}
	fmt.Fprintf(&b, ", %.0f/s", s.Rate())
	if eta := s.ETA(); eta > 0 {
		fmt.Fprintf(&b, ", eta %v", eta.Round(time.Second))
	}
	return b.String()
}

// Progress tracks one piece of long work.
type Progress struct {
	label string
	every time.Duration
	draw  func(Snapshot, bool)
	now   func() time.Time
	start time.Time

	done, total atomic.Int64
	next        atomic.Int64 // Unix ns of the next draw

	mu       sync.Mutex // serialises draws
	finished bool
}

// New returns a Progress that draws to w: a redrawn bar when w is a
// terminal, a line every LineInterval otherwise. total may be 0 (unknown)
// and set later with SetTotal.
func New(w io.Writer, label string, total int64) *Progress {
	if IsTerminal(w) {
		return newProgress(label, total, BarInterval, func(s Snapshot, final bool) { drawBar(w, s, final) })
	}
	return newProgress(label, total, LineInterval, func(s Snapshot, _ bool) { fmt.Fprintln(w, s.String()) })
}

// NewFunc returns a Progress that calls fn at most once per every (and once
// more from Finish). fn is never called concurrently with itself.
func NewFunc(label string, total int64, every time.Duration, fn func(s Snapshot, final bool)) *Progress {
	return newProgress(label, total, every, fn)
}

func newProgress(label string, total int64, every time.Duration, draw func(Snapshot, bool)) *Progress {
	p := &Progress{label: label, every: every, draw: draw, now: time.Now}
	p.start = p.now()
	p.total.Store(total)
	p.next.Store(p.start.Add(every).UnixNano())
	return p
}

// SetTotal changes the total.
func (p *Progress) SetTotal(total int64) { p.total.Store(total) }

// Set records that done units are complete and draws if it is time.
func (p *Progress) Set(done int64) {
	p.done.Store(done)
	p.maybeDraw()
}

// Add records n more complete units and draws if it is time.
func (p *Progress) Add(n int64) {
	p.done.Add(n)
	p.maybeDraw()
}

// Snapshot returns the current state.
func (p *Progress) Snapshot() Snapshot {
	return Snapshot{Label: p.label, Done: p.done.Load(), Total: p.total.Load(), Elapsed: p.now().Sub(p.start)}
}

func (p *Progress) maybeDraw() {
	now := p.now()
	next := p.next.Load()
	if now.UnixNano() < next || !p.next.CompareAndSwap(next, now.Add(p.every).UnixNano()) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.finished {
		p.draw(p.Snapshot(), false)
	}
}

// Finish draws the final state once; later updates draw nothing.
func (p *Progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	p.finished = true
	p.draw(p.Snapshot(), true)
}

// barWidth is the number of cells of the bar.
const barWidth = 30

// drawBar redraws the line in place: carriage return, bar, counts, and
// clear to the end of the line; the final draw ends the line.
func drawBar(w io.Writer, s Snapshot, final bool) {
	filled := int(s.Fraction() * barWidth)
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", barWidth-filled)
	if s.Total <= 0 {
		bar = strings.Repeat("?", barWidth)
	}
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(w, "\r%s [%s] %s\x1b[K%s", s.Label, bar, strings.TrimPrefix(s.String(), s.Label+": "), end)
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
