package harness

import (
	"fmt"
	"runtime/metrics"
	"syscall"
	"time"
)

// usage is the process's CPU time, minor page faults and Go heap bytes
// allocated so far at a moment, and the moment.
type usage struct {
	cpu    float64 // user + system seconds
	minflt int64
	alloc  uint64
	at     time.Time
}

const heapAllocsMetric = "/gc/heap/allocs:bytes"

func startUsage() usage {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return usage{}
	}
	s := []metrics.Sample{{Name: heapAllocsMetric}}
	metrics.Read(s)
	var alloc uint64
	if s[0].Value.Kind() == metrics.KindUint64 {
		alloc = s[0].Value.Uint64()
	}
	return usage{cpu: float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9, minflt: ru.Minflt, alloc: alloc, at: time.Now()}
}

// spanUsage follows a job run's timed span: the process's usage at its
// start, and at the poll that first found half of the input committed
// (waitCommitted's half), with the records committed then.
type spanUsage struct {
	start, mid usage
	midRecords int64 // 0: the half was not seen
}

func startSpanUsage() *spanUsage { return &spanUsage{start: startUsage()} }

// half is waitCommitted's half.
func (s *spanUsage) half(committed int64) { s.mid, s.midRecords = startUsage(), committed }

// perRecord is the CPU in microseconds, the minor faults and the Go heap
// bytes allocated of each record from a to b over n records.
func perRecord(a, b usage, n int64) (us, faults, alloc float64) {
	if n <= 0 {
		return 0, 0, 0
	}
	return (b.cpu - a.cpu) * 1e6 / float64(n), float64(b.minflt-a.minflt) / float64(n), float64(b.alloc-a.alloc) / float64(n)
}

// report says the process CPU, minor faults and Go heap bytes allocated
// per input record over the
// span until now, and over its second half alone (from the half to now,
// per record committed in it): a job's start-up costs (first writes to its
// tables, buffers and filters) fall in the first half. The whole process:
// with the embedded broker its work is in it too.
func (s *spanUsage) report(p *Progress, what string, ends map[string][]int64) {
	var n int64
	for _, e := range ends {
		for _, o := range e {
			n += o
		}
	}
	now := startUsage()
	if n == 0 || s.start.cpu == 0 {
		return
	}
	us, flt, alloc := perRecord(s.start, now, n)
	msg := fmt.Sprintf("%s: timed span %.3f us of process CPU per record, %.4f minor faults per record, %.0f heap bytes allocated per record (process-wide)", what, us, flt, alloc)
	if s.midRecords > 0 && s.midRecords < n {
		us2, flt2, alloc2 := perRecord(s.mid, now, n-s.midRecords)
		rate := float64(n-s.midRecords) / now.at.Sub(s.mid.at).Seconds()
		msg += fmt.Sprintf("; second half (after %d records) %.3f us, %.4f faults, %.0f heap bytes per record, %.0f records/s", s.midRecords, us2, flt2, alloc2, rate)
	}
	p.Say("%s", msg)
}
