package harness

import (
	"fmt"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"sort"
	"sync"
	"time"

	"github.com/dedupstream/dedupstream/statestore"
)

// memSampler samples, every period, the process's resident memory and what
// it is made of, and keeps, for each phase, the sample taken at its highest
// RSS: where a case's RSS peak comes from and what it is made of. The components are
//
//   - go: memory the Go runtime holds from the OS and has not released
//     (heap, stacks, runtime metadata), /memory/classes/total minus
//     /memory/classes/heap/released;
//   - goLive: the live Go heap after the last GC (/gc/heap/live), which is
//     what GC headroom multiplies;
//   - cache: the bytes of blocks in the store's shared Pebble block cache
//     (C memory; Pebble allocates it outside the Go heap);
//   - the rest of the RSS (other C memory: Pebble memtable arenas, cgo and
//     allocator overhead) is RSS minus go minus cache;
//   - gcCPU: the share of the process's CPU time the GC took so far
//     (/cpu/classes/gc/total over /cpu/classes/total, both estimates of
//     the runtime), what a lower GC target costs;
//
// and, at each phase's peak (within breakdownStep), what the RSS is made
// of by owner (breakdown):
// the Go heap's objects, its free pages not yet returned and its GC goal;
// the store's off-heap regions by kind, resident bytes (statestore.OffHeap:
// index tables and entries, sort buffers, run filters); the memory in
// transparent huge pages (AnonHugePages of /proc/self/smaps_rollup: the
// Bloom fronts' bitsets, the only memory advised so); the C allocator's
// bytes in use and free in its arenas (mallinfo2: Pebble's blocks and
// memtables, and what glibc keeps of freed ones).
type memSampler struct {
	mu    sync.Mutex
	peaks map[string]memSample // by phase
	order []string
	phase string
	stop  chan struct{}
	done  chan struct{}
}

// memSample is one sample of memSampler, in bytes.
type memSample struct {
	phase                 string
	rss, goMapped, goLive uint64
	cache                 int64
	gcCPU                 float64
	// by is the breakdown read at an RSS of byRSS, within breakdownStep
	// of rss.
	by    breakdown
	byRSS uint64
}

// breakdownStep is how far a phase's peak RSS may pass the RSS of its
// breakdown before the breakdown is read again.
const breakdownStep = 8 << 20

// breakdown is what a sample's RSS is made of by owner, in bytes.
type breakdown struct {
	goObjects, goFree, goGoal uint64 // heap objects, free not released, GC goal
	offHeap                   map[statestore.MemKind]statestore.OffHeapUse
	hugePages                 uint64 // AnonHugePages
	cInUse, cFree             uint64 // mallinfo2
	cKnown                    bool
	cArenas                   int // glibc's arenas (0: unknown)
}

// breakdownNow reads the breakdown; samples are metrics.Read's buffer of
// the heap figures.
func breakdownNow() breakdown {
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/gc/heap/goal:bytes"},
	}
	metrics.Read(samples)
	b := breakdown{goObjects: samples[0].Value.Uint64(), goFree: samples[1].Value.Uint64(), goGoal: samples[2].Value.Uint64()}
	b.offHeap = statestore.OffHeap()
	b.hugePages = procField("/proc/self/smaps_rollup", "AnonHugePages:")
	b.cInUse, b.cFree, b.cKnown = statestore.CHeap()
	b.cArenas, _ = statestore.CArenas()
	return b
}

// String lists the breakdown in MiB.
func (b breakdown) String() string {
	mib := func(v uint64) string { return fmt.Sprintf("%.0f", float64(v)/(1<<20)) }
	out := fmt.Sprintf("Go heap objects %s MiB, free not released %s, GC goal %s; huge pages (Bloom fronts) %s", mib(b.goObjects), mib(b.goFree), mib(b.goGoal), mib(b.hugePages))
	kinds := make([]string, 0, len(b.offHeap))
	for k := range b.offHeap {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		u := b.offHeap[statestore.MemKind(k)]
		out += fmt.Sprintf("; store %s %s resident of %s mapped", k, mib(uint64(u.Resident)), mib(uint64(u.Mapped)))
	}
	if b.cKnown {
		out += fmt.Sprintf("; C allocator in use %s, free in its arenas %s", mib(b.cInUse), mib(b.cFree))
		if b.cArenas > 0 {
			out += fmt.Sprintf(" (%d arenas)", b.cArenas)
		}
	}
	return out
}

// startMemSampler samples every period until stopped; cache reports the
// block cache's bytes (nil: 0).
func startMemSampler(period time.Duration, cache func() int64) *memSampler {
	m := &memSampler{peaks: map[string]memSample{}, stop: make(chan struct{}), done: make(chan struct{})}
	samples := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/total:cpu-seconds"},
	}
	go func() {
		defer close(m.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
			rss := procStatus("VmRSS:")
			metrics.Read(samples)
			s := memSample{rss: rss, goMapped: samples[0].Value.Uint64() - samples[1].Value.Uint64(), goLive: samples[2].Value.Uint64()}
			if total := samples[4].Value.Float64(); total > 0 {
				s.gcCPU = samples[3].Value.Float64() / total
			}
			if cache != nil {
				s.cache = cache()
			}
			m.mu.Lock()
			s.phase = m.phase
			p, ok := m.peaks[s.phase]
			m.mu.Unlock()
			if ok && s.rss <= p.rss {
				continue
			}
			// A new peak of its phase: what it is made of, read again only
			// once the RSS passed the last breakdown's by breakdownStep
			// (a breakdown walks the process's page tables: 40-170 ms at
			// 300 MiB, which taken at every new peak added 0.5 us of CPU
			// per record to a 30M sweep point).
			if ok && s.rss < p.byRSS+breakdownStep {
				s.by, s.byRSS = p.by, p.byRSS
			} else {
				s.by, s.byRSS = breakdownNow(), s.rss
			}
			m.mu.Lock()
			if p, ok := m.peaks[s.phase]; !ok || s.rss > p.rss {
				if !ok {
					m.order = append(m.order, s.phase)
				}
				m.peaks[s.phase] = s
			}
			m.mu.Unlock()
		}
	}()
	return m
}

// setPhase names the phase the following samples belong to.
func (m *memSampler) setPhase(p string) {
	m.mu.Lock()
	m.phase = p
	m.mu.Unlock()
}

// finish stops sampling and returns the sample at the highest RSS of each
// phase, in the order the phases began.
func (m *memSampler) finish() []memSample {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]memSample, 0, len(m.order))
	for _, p := range m.order {
		out = append(out, m.peaks[p])
	}
	return out
}

// String is the sample in MiB, by component.
func (s memSample) String() string {
	mib := func(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
	other := int64(s.rss) - int64(s.goMapped) - s.cache
	return fmt.Sprintf("RSS peak %s in %s: Go runtime %s (live heap %s), block cache %s, other %.0f MiB; GC %.1f %% of CPU so far; by owner at RSS %s: %s",
		mib(s.rss), s.phase, mib(s.goMapped), mib(s.goLive), mib(uint64(s.cache)), float64(other)/(1<<20), 100*s.gcCPU, mib(s.byRSS), s.by)
}

// startCPUProfile starts a CPU profile into path, when path is not empty,
// and returns what stops it (a no-op if none started).
func startCPUProfile(path string, p *Progress) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		p.Say("cpu profile: %v", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			p.Say("cpu profile: %v", err)
		}
	}
}

// writeHeapProfile writes a heap profile (go tool pprof -sample_index
// inuse_space) to path, when path is not empty, after a GC: what is live.
func writeHeapProfile(path string, p *Progress) {
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		p.Say("heap profile: %v", err)
	}
}
