package pipeline

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/statestore"
)

// The engine benchmarks measure a stage alone (no broker): key extraction,
// hashing, collapse, Bloom front, Pebble confirm and a state commit per
// batch of benchBatch records. The window (24h, 4 generations) is pre-filled
// with the named number of keys arriving at a steady rate, and the timed
// stream goes on at that rate, so generations rotate and expire as in
// production. Duplicates repeat a uniformly chosen key of the window (far
// repeats: the expensive kind, each one a store read). Keys are 16 to 36
// bytes. The in-memory map ceiling runs the same stream in the same run.
//
//	make bench-go BENCH=Engine
const benchBatch = 10_000

// keyStream makes deterministic business keys of 16 to 36 bytes and the
// batches that carry them.
type keyStream struct {
	next   uint64  // keys 0..next-1 were emitted
	span   uint64  // keys per window: the last span keys are in the window
	stepMs float64 // record time between two new keys
	rng    *rand.Rand
	dup    float64
	arena  []byte
	recs   []Record
}

const benchWindow = 24 * time.Hour

func newKeyStream(keysPerWindow int) *keyStream {
	return &keyStream{
		span:   uint64(keysPerWindow),
		stepMs: float64(benchWindow.Milliseconds()) / float64(keysPerWindow),
		rng:    rand.New(rand.NewPCG(1, 2)),
		arena:  make([]byte, 0, benchBatch*40),
		recs:   make([]Record, benchBatch),
	}
}

// benchEpochMs is the record time of key 0.
const benchEpochMs = 1_700_000_000_000

const keyPad = "-abcdefghijklmnopqrstuvwxyz"

// appendKey writes key i: "ord-" + i in at least 12 digits, zero-padded on
// the left, then i%21 bytes of padding. Distinct i give distinct keys (the
// digits alone determine i); padding the digits on the right made key i and
// key i*10^6 identical, since 10^6 % 21 == 1.
func appendKey(dst []byte, i uint64) []byte {
	dst = append(dst, "ord-"...)
	for p := uint64(100_000_000_000); p > 1 && i < p; p /= 10 {
		dst = append(dst, '0')
	}
	dst = strconv.AppendUint(dst, i, 10)
	return append(dst, keyPad[:i%21]...)
}

// batch fills the next n records; fresh=true makes only new keys.
func (k *keyStream) batch(n int, fresh bool) []Record {
	k.arena = k.arena[:0]
	for i := range n {
		id := k.next
		if !fresh && k.next > 0 && k.rng.Float64() < k.dup {
			id = k.next - 1 - k.rng.Uint64N(min(k.next, k.span))
		} else {
			k.next++
		}
		start := len(k.arena)
		k.arena = appendKey(k.arena, id)
		k.recs[i].Key = k.arena[start:len(k.arena):len(k.arena)]
		k.recs[i].TimestampMs = benchEpochMs + int64(float64(k.next)*k.stepMs)
	}
	return k.recs[:n]
}

// benchEnv is a pre-filled stage kept across the b.N rounds of one size.
type benchEnv struct {
	dir    string
	budget *statestore.Budget
	stage  *Stage
	stream *keyStream
	seen   map[partition.Hash]struct{}
	// rssPerKey is the growth of the process RSS over the pre-fill per key
	// (after a GC that returns freed heap), bloomPerKey the Bloom front's
	// share of it.
	rssPerKey, bloomPerKey float64
}

var benchEnvs = map[string]*benchEnv{}

func openBenchEnv(b *testing.B, keys int, ceiling bool) *benchEnv {
	name := fmt.Sprintf("%d/%v", keys, ceiling)
	if e, ok := benchEnvs[name]; ok {
		return e
	}
	e := &benchEnv{stream: newKeyStream(keys)}
	start := time.Now()
	if ceiling {
		e.seen = make(map[partition.Hash]struct{}, keys*11/10)
		for e.stream.next < uint64(keys) {
			for _, r := range e.stream.batch(benchBatch, true) {
				e.seen[partition.HashKey(r.Key)] = struct{}{}
			}
		}
	} else {
		dir, err := os.MkdirTemp("", "engine-bench-")
		if err != nil {
			b.Fatal(err)
		}
		rss0 := settledRSS()
		e.dir = dir
		// The store's memory as the job gives it by default: one Budget
		// of statestore.DefaultMemory (a shared block cache; memtables
		// planned from it) for the one store.
		if e.budget, err = statestore.NewBudget(statestore.DefaultMemory, 0); err != nil {
			b.Fatal(err)
		}
		st, err := Open(dir, benchConfig(keys), Options{Clock: benchClock, Store: e.budget.Options(statestore.Options{}, 1)})
		if err != nil {
			b.Fatal(err)
		}
		e.stage = st
		var out []Decision
		for e.stream.next < uint64(keys) {
			if out, _, err = st.Process(e.stream.batch(benchBatch, true), out[:0]); err != nil {
				b.Fatal(err)
			}
			if err := st.Commit(nil); err != nil {
				b.Fatal(err)
			}
		}
		e.rssPerKey = float64(settledRSS()-rss0) / float64(keys)
		bloom := 0
		for _, g := range st.filter.Stats() {
			bloom += g.Bytes
		}
		e.bloomPerKey = float64(bloom) / float64(keys)
		b.Logf("RSS grew %.1f B/key over the pre-fill, %.1f of them the Bloom front", e.rssPerKey, e.bloomPerKey)
	}
	b.Logf("prefilled %d keys (ceiling=%v) in %v", keys, ceiling, time.Since(start).Round(time.Millisecond))
	benchEnvs[name] = e
	return e
}

func closeBenchEnvs() {
	for name, e := range benchEnvs {
		if e.stage != nil {
			e.stage.Close()
			os.RemoveAll(e.dir)
		}
		if e.budget != nil {
			e.budget.Close()
		}
		delete(benchEnvs, name)
	}
}

func BenchmarkEngine(b *testing.B) {
	defer closeBenchEnvs()
	for _, keys := range []int{1_000_000, 10_000_000} {
		for _, dup := range []float64{0.01, 0.05, 0.20} {
			name := fmt.Sprintf("keys=%dM/dup=%d%%", keys/1_000_000, int(dup*100))
			b.Run(name+"/stage", func(b *testing.B) { benchStage(b, openBenchEnv(b, keys, false), dup) })
			b.Run(name+"/map-ceiling", func(b *testing.B) { benchMap(b, openBenchEnv(b, keys, true), dup) })
		}
	}
}

func benchStage(b *testing.B, e *benchEnv, dup float64) {
	e.stream.dup = dup
	out := make([]Decision, 0, benchBatch)
	var c Counts
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for done := 0; done < b.N; done += benchBatch {
		recs := e.stream.batch(min(benchBatch, b.N-done), false)
		var bc Counts
		var err error
		if out, bc, err = e.stage.Process(recs, out[:0]); err != nil {
			b.Fatal(err)
		}
		if err := e.stage.Commit(nil); err != nil {
			b.Fatal(err)
		}
		c.Add(bc)
	}
	b.StopTimer()
	reportCPU(b, cpu)
	b.ReportMetric(e.rssPerKey-e.bloomPerKey, "prefill-rss-B/key-beyond-bloom")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	if c.In > 0 {
		b.ReportMetric(float64(c.StoreReads)/float64(c.In), "reads/record")
		b.ReportMetric(float64(c.DroppedBatch+c.DroppedHistory)/float64(c.In), "dup-ratio")
	}
}

func benchMap(b *testing.B, e *benchEnv, dup float64) {
	e.stream.dup = dup
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for done := 0; done < b.N; done += benchBatch {
		for _, r := range e.stream.batch(min(benchBatch, b.N-done), false) {
			h := partition.HashKey(r.Key)
			if _, ok := e.seen[h]; !ok {
				e.seen[h] = struct{}{}
			}
		}
	}
	b.StopTimer()
	reportCPU(b, cpu)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// settledRSS is the process's resident set after a GC that returns freed
// heap to the system (bytes, from /proc/self/statm; 0 if unreadable).
func settledRSS() int64 {
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, rss int64
	if _, err := fmt.Sscan(string(b), &size, &rss); err != nil {
		return 0
	}
	return rss * int64(os.Getpagesize())
}

// reportCPU reports the process CPU per record since start: on a shared
// machine the steady figure, where records/s is wall clock.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/record")
}

// BenchmarkReopen measures how long a stage with a full window takes to be
// ready again: after a clean Close (Bloom snapshot loaded) and after a crash
// (no snapshot: the filter is rebuilt by scanning the store).
//
//	make bench-go BENCH=Reopen BENCHTIME=3x
func BenchmarkReopen(b *testing.B) {
	defer closeBenchEnvs()
	for _, keys := range []int{1_000_000, 10_000_000} {
		// snapshot: a clean restart. The crashes follow a periodic snapshot
		// (SaveSnapshot) and a tenth of the window more committed, and pay
		// the WAL replay of those commits; stale finds the periodic
		// snapshot and scans the generations written since, rebuild finds
		// none and scans the whole store.
		//
		// kill9 is the real crash: a child process opens the stage, saves
		// the periodic snapshot, commits a tenth of the window more and
		// kills itself with SIGKILL; the store replays its commit log.
		for _, kind := range []string{"snapshot", "rebuild", "stale", "kill9"} {
			b.Run(fmt.Sprintf("keys=%dM/%s", keys/1_000_000, kind), func(b *testing.B) {
				e := openBenchEnv(b, keys, false)
				cfg, opts := e.stage.cfg, Options{Clock: e.stage.clock}
				path := filepath.Join(e.dir, SnapshotFile)
				m := newOpenMeter(b)
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					var periodic []byte
					if kind == "kill9" {
						if err := e.stage.Close(); err != nil {
							b.Fatal(err)
						}
						killedChild(b, e, keys)
					}
					if kind == "stale" || kind == "rebuild" {
						if err := e.stage.SaveSnapshot(); err != nil {
							b.Fatal(err)
						}
						var err error
						if periodic, err = os.ReadFile(path); err != nil {
							b.Fatal(err)
						}
						var out []Decision
						for n := 0; n < keys/10; n += benchBatch {
							if out, _, err = e.stage.Process(e.stream.batch(benchBatch, true), out[:0]); err != nil {
								b.Fatal(err)
							}
							if err := e.stage.Commit(nil); err != nil {
								b.Fatal(err)
							}
						}
					}
					if kind != "kill9" {
						if err := e.stage.Close(); err != nil {
							b.Fatal(err)
						}
					}
					switch kind {
					case "stale": // the crash leaves the periodic snapshot
						if err := os.WriteFile(path, periodic, 0o644); err != nil {
							b.Fatal(err)
						}
					case "rebuild":
						if err := os.Remove(path); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
					m.open(b, func() (err error) {
						e.stage, err = Open(e.dir, cfg, opts)
						return err
					})
				}
				b.ReportMetric(float64(keys)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
				m.report(b)
			})
		}
	}
}

// benchConfig and benchClock are the engine benchmarks' stage settings.
func benchConfig(keys int) Config { return Config{Window: benchWindow, ExpectedKeys: uint(keys)} }

func benchClock() time.Time {
	return time.UnixMilli(benchEpochMs + 1000*benchWindow.Milliseconds())
}

// killedChild runs TestKill9Child in a child process on e's closed stage
// and waits for it to die of SIGKILL; e's stream moves past the keys the
// child committed.
func killedChild(b *testing.B, e *benchEnv, keys int) {
	b.Helper()
	n := keys / 10
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Child$")
	cmd.Env = append(os.Environ(), "KILL9_DIR="+e.dir, "KILL9_KEYS="+strconv.Itoa(keys),
		"KILL9_FROM="+strconv.FormatUint(e.stream.next, 10), "KILL9_N="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		b.Fatalf("child: %v, want death by SIGKILL", err)
	}
	e.stream.next += uint64(n)
}

// TestKill9Child is the child of killedChild; without its environment it
// does nothing.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv("KILL9_DIR")
	if dir == "" {
		t.Skip("only run by BenchmarkReopen")
	}
	keys, _ := strconv.Atoi(os.Getenv("KILL9_KEYS"))
	n, _ := strconv.Atoi(os.Getenv("KILL9_N"))
	from, _ := strconv.ParseUint(os.Getenv("KILL9_FROM"), 10, 64)
	st, err := Open(dir, benchConfig(keys), Options{Clock: benchClock})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SaveSnapshot(); err != nil {
		t.Fatal(err)
	}
	stream := newKeyStream(keys)
	stream.next = from
	var out []Decision
	for done := 0; done < n; done += benchBatch {
		if out, _, err = st.Process(stream.batch(benchBatch, true), out[:0]); err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(nil); err != nil {
			t.Fatal(err)
		}
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// TestAppendKeyDistinct checks that the benchmark's keys are distinct, across
// the digit lengths and the i*10^6 pairs the old right padding merged.
func TestAppendKeyDistinct(t *testing.T) {
	seen := map[string]uint64{}
	check := func(i uint64) {
		k := string(appendKey(nil, i))
		if j, ok := seen[k]; ok && j != i {
			t.Fatalf("keys %d and %d are both %q", i, j, k)
		}
		seen[k] = i
		if n := len(k); n < 16 || n > 36 {
			t.Fatalf("key %d is %d bytes, want 16 to 36", i, n)
		}
	}
	for i := uint64(0); i < 200_000; i++ {
		check(i)
		check(i * 1_000_000)
	}
}
