package harness

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMemSamplerPhases: the sampler reports one sample per phase, in the
// order the phases began, each with the cache figure it was given and an
// RSS no lower than the Go runtime's resident part would allow to be 0.
func TestMemSamplerPhases(t *testing.T) {
	if procStatus("VmRSS:") == 0 {
		t.Skip("no /proc/self/status")
	}
	cache := int64(7 << 20)
	m := startMemSampler(time.Millisecond, func() int64 { return cache })
	wait := func() {
		for i := 0; i < 20; i++ {
			time.Sleep(2 * time.Millisecond)
			runtime.Gosched()
		}
	}
	m.setPhase("first")
	wait()
	m.setPhase("second")
	wait()
	got := m.finish()
	var phases []string
	for _, s := range got {
		phases = append(phases, s.phase)
		if s.rss == 0 || s.goMapped == 0 {
			t.Fatalf("phase %q: rss %d, go %d: not sampled", s.phase, s.rss, s.goMapped)
		}
		if s.cache != cache {
			t.Fatalf("phase %q: cache %d, want %d", s.phase, s.cache, cache)
		}
		if s.byRSS == 0 || s.by.goGoal == 0 || s.rss >= s.byRSS+breakdownStep {
			t.Fatalf("phase %q: breakdown at RSS %d (GC goal %d) for a peak of %d: not read at the peak", s.phase, s.byRSS, s.by.goGoal, s.rss)
		}
		if !strings.Contains(s.String(), "in "+s.phase+":") {
			t.Fatalf("String %q does not name the phase", s.String())
		}
	}
	// The sample before the first setPhase has phase "" and comes first.
	if n := len(phases); n < 2 || phases[n-2] != "first" || phases[n-1] != "second" {
		t.Fatalf("phases %q, want ... first, second", phases)
	}
}
