package job

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/dedupstream/dedupstream/statestore"
)

// TestMemoryRSS measures the resident memory of one instance's stages, each
// configuration in a fresh process (RSS never shrinks back within one):
//
//   - "per-store": every store with its own 128 MiB cache and 64 MiB
//     memtables, as before state.memory;
//   - "budget": the stores under one state.memory budget, wired as Run
//     wires them (openMemory, planMemory, storeOptions), at the GC target
//     "dedupstream run" sets (TuneGC).
//
// Each child opens its stages (Bloom front sized for the keys), fills them
// round-robin in commit cycles of 10k fresh keys spread over a 24h window,
// reads 10k repeats per stage back (store confirms through the Bloom front),
// and reports VmRSS and VmHWM from /proc/self/status. The budget
// configuration must stay under 1 GiB at 16 partitions x 1M keys.
//
//	DEDUPSTREAM_RSS=16x1000000 go test ./job -run '^TestMemoryRSS$' -v -timeout 1h
//	DEDUPSTREAM_RSS=1x10000000 DEDUPSTREAM_RSS_MODES=budget go test ./job -run '^TestMemoryRSS$' -v -timeout 1h
//
// DEDUPSTREAM_RSS is PARTITIONSxKEYS; DEDUPSTREAM_RSS_MODES lists the
// configurations (default "per-store,budget"); DEDUPSTREAM_RSS_MEMORY sets
// state.memory (default: its default).
func TestMemoryRSS(t *testing.T) {
	spec := os.Getenv("DEDUPSTREAM_RSS")
	if spec == "" {
		t.Skip("set DEDUPSTREAM_RSS=PARTITIONSxKEYS (e.g. 16x1000000) to measure")
	}
	parts, keys := parseRSSSpec(t, spec)
	modes := strings.Split(cmpOr(os.Getenv("DEDUPSTREAM_RSS_MODES"), "per-store,budget"), ",")
	results := map[string]rssResult{}
	for _, mode := range modes {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestMemoryRSSChild$", "-test.v", "-test.timeout", "1h")
		cmd.Env = append(os.Environ(), "DEDUPSTREAM_RSS_CHILD="+mode+","+spec)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
		var r rssResult
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "RSSRESULT "); ok {
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
			}
		}
		if r.Mode == "" {
			t.Fatalf("%s: no result in the child's output:\n%s", mode, out)
		}
		results[mode] = r
		t.Logf("%-9s %2d partitions x %d keys: RSS peak %s, at end %s (after open %s); Bloom fronts %s; "+
			"beyond the Bloom fronts %.2f B/key; memtable %s per store, cache capacity %s, blocks cached %s; fill %.0f keys/s, %.2f us CPU/key",
			mode, parts, keys, mib(r.HWM), mib(r.RSSEnd), mib(r.RSSOpen), mib(r.Bloom),
			float64(r.RSSEnd-r.RSSOpen-r.Bloom)/float64(parts*keys), mib(r.MemTable), mib(r.CacheCap), mib(r.CacheUsed), r.KeysPerSec, r.CPUPerKey)
	}
	if r, ok := results["budget"]; ok {
		// Under 1 GiB for the case; in general under the budget,
		// the Bloom fronts and the runtime's own ~100 MiB.
		limit := r.Budget + r.Bloom + 128<<20
		if parts == 16 && keys == 1_000_000 {
			limit = min(limit, 1<<30)
		}
		if r.HWM > limit {
			t.Errorf("budget: RSS peak %s exceeds %s", mib(r.HWM), mib(limit))
		}
	}
	if a, b := results["per-store"], results["budget"]; a.Mode != "" && b.Mode != "" {
		t.Logf("RSS peak budget / per-store: %.2f", float64(b.HWM)/float64(a.HWM))
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func mib(n int64) string { return fmt.Sprintf("%.0fMiB", float64(n)/(1<<20)) }

func parseRSSSpec(t *testing.T, spec string) (parts, keys int) {
	p, k, ok := strings.Cut(spec, "x")
	parts, err1 := strconv.Atoi(p)
	keys, err2 := strconv.Atoi(k)
	if !ok || err1 != nil || err2 != nil || parts < 1 || keys < 1 {
		t.Fatalf("DEDUPSTREAM_RSS=%q: want PARTITIONSxKEYS", spec)
	}
	return parts, keys
}

type rssResult struct {
	Mode                                  string
	RSSOpen, RSSEnd, HWM, Bloom           int64
	Budget, MemTable, CacheCap, CacheUsed int64
	KeysPerSec, CPUPerKey                 float64 // fill rate; process CPU us per key filled
}

// procStatus returns a field of /proc/self/status in bytes.
func procStatus(t *testing.T, field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// cpuTime is the CPU time of the whole process, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestMemoryRSSChild is one configuration of TestMemoryRSS.
func TestMemoryRSSChild(t *testing.T) {
	env := os.Getenv("DEDUPSTREAM_RSS_CHILD")
	if env == "" {
		t.Skip("run by TestMemoryRSS")
	}
	mode, spec, _ := strings.Cut(env, ",")
	parts, keys := parseRSSSpec(t, spec)
	const window = 24 * time.Hour
	const epochMs = 1_700_000_000_000
	cfg := &config.Config{
		Dedup: config.Dedup{Window: window, ExpectedKeys: uint(keys)},
		State: config.State{Dir: t.TempDir()},
	}
	if m := os.Getenv("DEDUPSTREAM_RSS_MEMORY"); m != "" {
		sz, err := config.ParseByteSize(m)
		if err != nil {
			t.Fatal(err)
		}
		cfg.State.Memory = sz
	}
	cfg.ApplyDefaults()
	res := rssResult{Mode: mode}
	var storeOpts func() statestore.Options
	cacheStats := func() {}
	switch mode {
	case "per-store":
		storeOpts = func() statestore.Options {
			return statestore.Options{CacheSize: statestore.DefaultCacheSize, MemTableSize: statestore.DefaultMemTableSize}
		}
		res.Budget = int64(parts) * (statestore.DefaultCacheSize + 3*int64(statestore.DefaultMemTableSize))
		res.MemTable = int64(statestore.DefaultMemTableSize)
	case "budget":
		defer debug.SetGCPercent(TuneGC()) // as "dedupstream run" sets it
		j := &Job{cfg: cfg, log: slog.New(slog.DiscardHandler)}
		if err := j.openMemory(); err != nil {
			t.Fatal(err)
		}
		defer j.closeMemory()
		j.planMemory(parts)
		storeOpts = func() statestore.Options { return j.storeOptions(statestore.Options{}) }
		res.Budget = j.mem.budget.Size()
		res.MemTable = int64(j.mem.memTable)
		cacheStats = func() { res.CacheCap, res.CacheUsed = j.mem.budget.CacheCapacity(), j.mem.budget.CacheUsed() }
	default:
		t.Fatalf("mode %q: want per-store or budget", mode)
	}
	clockMs := int64(epochMs)
	clock := func() time.Time { return time.UnixMilli(clockMs) }
	pc, err := cfg.Pipeline()
	if err != nil {
		t.Fatal(err)
	}
	stages := make([]*pipeline.Stage, parts)
	for p := range stages {
		st, err := pipeline.Open(StateDir(cfg.State.Dir, p), pc, pipeline.Options{Clock: clock, Store: storeOpts()})
		if err != nil {
			t.Fatal(err)
		}
		stages[p] = st
		res.Bloom += int64(st.Stats().FilterBytes)
	}
	defer func() {
		for _, st := range stages {
			if err := st.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	res.RSSOpen = procStatus(t, "VmRSS")

	const batch = 10_000
	recs := make([]pipeline.Record, batch)
	arena := make([]byte, 0, batch*24)
	var out []pipeline.Decision
	stepMs := float64(window.Milliseconds()) / float64(keys)
	fill := func(st *pipeline.Stage, p, from, n int, wantEmit bool) {
		arena = arena[:0]
		for i := range n {
			k := from + i
			start := len(arena)
			arena = fmt.Appendf(arena, "p%02d-key-%010d", p, k)
			recs[i].Key = arena[start:len(arena):len(arena)]
			recs[i].TimestampMs = epochMs + int64(float64(k)*stepMs)
		}
		clockMs = recs[n-1].TimestampMs
		var c pipeline.Counts
		var err error
		if out, c, err = st.Process(recs[:n], out[:0]); err != nil {
			t.Fatal(err)
		}
		if wantEmit && c.Emitted != uint64(n) || !wantEmit && c.DroppedHistory != uint64(n) {
			t.Fatalf("partition %d keys %d..%d: %+v", p, from, from+n, c)
		}
		if err := st.Commit(nil); err != nil {
			t.Fatal(err)
		}
	}
	start, cpu := time.Now(), cpuTime()
	for from := 0; from < keys; from += batch {
		for p, st := range stages {
			fill(st, p, from, min(batch, keys-from), true)
		}
	}
	res.KeysPerSec = float64(parts*keys) / time.Since(start).Seconds()
	res.CPUPerKey = float64((cpuTime() - cpu).Microseconds()) / float64(parts*keys)
	// Repeats of the newest keys: every one is a Bloom maybe confirmed by
	// the store, through the cache.
	for p, st := range stages {
		fill(st, p, max(keys-batch, 0), min(batch, keys), false)
	}
	res.RSSEnd = procStatus(t, "VmRSS")
	res.HWM = procStatus(t, "VmHWM")
	cacheStats()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("RSSRESULT %s\n", b)
}
