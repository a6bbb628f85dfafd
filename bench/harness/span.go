package harness

import (
	"context"
	"fmt"
	"runtime/pprof"
	"syscall"
	"time"
)

// spanCPU accounts the process CPU of an engine case's timed records by
// where it falls, so that two points of a sweep can be compared by what
// each paid for rather than by one wall-clock rate:
//
//   - stage: inside the stage's calls (Process + Commit), which the
//     records/s figure times, and whatever ran beside them on the other
//     core (the store's flusher and merger, the GC);
//   - between: between those calls (the generator, the checker, and the
//     background work beside them), which records/s does not time;
//   - tail: after the last record until the process is quiet again: the
//     flushes and merges the store still owed when timing stopped.
//
// The store's background work can thus land in the timed calls, between
// them or after them; stage+between is what the records cost while they
// ran, stage+between+tail bounds it from above (the tail may include work a
// pre-fill left, as the span may begin with it). Minor and major page
// faults and the bytes written (to files or sockets) are counted over the span
// and the tail.
//
// It also labels the calling goroutine's CPU profile samples span=stage
// inside the calls and span=harness between them (go tool pprof -tagfocus
// span=stage); the store's own goroutines were started before and carry no
// label.
type spanCPU struct {
	stage, between, tail float64 // CPU seconds
	tailWall             time.Duration
	minflt, majflt       int64
	written, written0    uint64  // bytes passed to write system calls: over the span, at its start
	last                 float64 // CPU at the last mark
	ru0                  syscall.Rusage
	inStage, inHarness   context.Context
}

// startSpan starts the accounting between two stage calls.
func startSpan() *spanCPU {
	s := &spanCPU{
		inStage:   pprof.WithLabels(context.Background(), pprof.Labels("span", "stage")),
		inHarness: pprof.WithLabels(context.Background(), pprof.Labels("span", "harness")),
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &s.ru0)
	s.last = ruCPU(&s.ru0)
	s.written0 = writtenBytes()
	pprof.SetGoroutineLabels(s.inHarness)
	return s
}

// enter marks the start of a stage call.
func (s *spanCPU) enter() {
	now := selfCPU()
	s.between += now - s.last
	s.last = now
	pprof.SetGoroutineLabels(s.inStage)
}

// leave marks the end of a stage call.
func (s *spanCPU) leave() {
	now := selfCPU()
	s.stage += now - s.last
	s.last = now
	pprof.SetGoroutineLabels(s.inHarness)
}

// Quiet is when settle calls the process quiet: less than quietShare of
// one core over quietPoll. The harness's own memory sampler and the Go
// runtime stay well under it.
const (
	quietPoll  = 100 * time.Millisecond
	quietShare = 0.05
)

// settle ends the span: it counts the page faults since startSpan, then
// waits until the process is quiet (or max has passed) and counts the CPU
// it used meanwhile as the tail.
func (s *spanCPU) settle(max time.Duration) {
	pprof.SetGoroutineLabels(context.Background())
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s.minflt, s.majflt = ru.Minflt-s.ru0.Minflt, ru.Majflt-s.ru0.Majflt
	s.between += ruCPU(&ru) - s.last
	t0, c0 := time.Now(), ruCPU(&ru)
	prev := c0
	for time.Since(t0) < max {
		time.Sleep(quietPoll)
		now := selfCPU()
		if now-prev < quietShare*quietPoll.Seconds() {
			prev = now
			break
		}
		prev = now
	}
	s.tail, s.tailWall = prev-c0, time.Since(t0)
	s.written = writtenBytes() - s.written0
}

// String reports the accounting per record of n.
func (s *spanCPU) String(n int) string {
	us := func(sec float64) float64 { return sec * 1e6 / float64(n) }
	return fmt.Sprintf("%.3f us of process CPU per record in the stage's calls, %.3f between them, %.3f after the last record "+
		"(%.2f s of CPU over %.1f s until quiet: what the store still owed); page faults %.3f minor, %.4f major per record; "+
		"%.1f bytes written per record (%d MiB)",
		us(s.stage), us(s.between), us(s.tail), s.tail, s.tailWall.Seconds(),
		float64(s.minflt)/float64(n), float64(s.majflt)/float64(n),
		float64(s.written)/float64(n), s.written>>20)
}

// ruCPU is the user+system CPU of ru in seconds.
func ruCPU(ru *syscall.Rusage) float64 {
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
