package pipeline

import (
	"os"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time of the whole process, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// openMeter measures the Opens of BenchmarkReopen: wall and process CPU
// time, and with REOPEN_CPUPROFILE=file a CPU profile of the Opens alone
// (the pre-fill and the killed child left out), written when the
// benchmark ends.
type openMeter struct {
	wall, cpu time.Duration
	n         int
	prof      *os.File
}

func newOpenMeter(b *testing.B) *openMeter {
	m := &openMeter{}
	if path := os.Getenv("REOPEN_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		m.prof = f
	}
	return m
}

// open times one Open, the stage's background work it starts included
// only as far as it overlaps the call.
func (m *openMeter) open(b *testing.B, fn func() error) {
	if m.prof != nil {
		if err := pprof.StartCPUProfile(m.prof); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	start, cpu := time.Now(), cpuTime()
	if err := fn(); err != nil {
		b.Fatal(err)
	}
	wall, used := time.Since(start), cpuTime()-cpu
	m.wall += wall
	m.cpu += used
	m.n++
	b.Logf("open %d: %.3f s wall, %.3f s CPU", m.n, wall.Seconds(), used.Seconds())
}

func (m *openMeter) report(b *testing.B) {
	if m.prof != nil {
		m.prof.Close()
	}
	if m.n > 0 {
		b.ReportMetric(m.wall.Seconds()/float64(m.n), "s/open")
		b.ReportMetric(m.cpu.Seconds()/float64(m.n), "cpu-s/open")
	}
}
