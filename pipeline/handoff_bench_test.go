package pipeline

import (
	"testing"
	"time"
)

// BenchmarkHandoff measures what splitting a stage's work between two
// goroutines would pay per hand-off, on this machine's scheduler: the
// reason a stage decides its batch on one goroutine.
//
// At 100M keys the stage goroutine is the sweep's critical path while the
// process uses about 1.35 of the two cores (docs/benchmarks.md, "Session
// 16"), so a second goroutine confirming a chunk's far repeats (about 15
// lookups per 256 records, some 50 us of pread and decoding) looked like a
// way to use the idle core. Each variant runs a chunk's 50 us of the
// stage's own work per op:
//
//   - alone: the chunk's work only;
//   - overlap: the stage hands a helper 20 us of work, does its 50 us, then
//     waits for the helper's answer (the plan: the helper's share hidden
//     behind the stage's);
//   - wake: the stage does its 50 us, then sends to a parked helper and
//     waits for its answer (a round trip to a goroutine with no work).
//
// On the 2-vCPU VM of session 16 (Go 1.26): alone 50.6 us, overlap 69-74
// us, wake 58.5 us per op. The readied helper does not start on the idle
// core before the stage blocks, so its 20 us run after the stage's 50 us,
// not beside them, and every hand-off adds about 8 us. Per chunk of 256
// records that is more than the helper's share of the lookups would save.
//
//	go test -run '^$' -bench Handoff -benchtime 20000x ./pipeline
func BenchmarkHandoff(b *testing.B) {
	const stageWork, helperWork = 50 * time.Microsecond, 20 * time.Microsecond
	b.Run("alone", func(b *testing.B) {
		for b.Loop() {
			busy(stageWork)
		}
	})
	b.Run("overlap", func(b *testing.B) {
		req, res := helper(helperWork)
		defer close(req)
		for b.Loop() {
			req <- struct{}{}
			busy(stageWork)
			<-res
		}
	})
	b.Run("wake", func(b *testing.B) {
		req, res := helper(0)
		defer close(req)
		for b.Loop() {
			busy(stageWork)
			req <- struct{}{}
			<-res
		}
	})
}

// helper starts a goroutine that answers every request on req after d of
// work; closing req stops it.
func helper(d time.Duration) (req chan<- struct{}, res <-chan struct{}) {
	in, out := make(chan struct{}), make(chan struct{})
	go func() {
		for range in {
			busy(d)
			out <- struct{}{}
		}
	}()
	return in, out
}

// busy keeps the CPU busy for d.
func busy(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
	}
}
