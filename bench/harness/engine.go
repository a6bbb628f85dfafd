package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/dedupstream/dedupstream/bench/resp"
	"github.com/dedupstream/dedupstream/bench/workload"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/dedupstream/dedupstream/statestore"
)

// engineBatch is the records per Process and Commit of the engine cases:
// a commit cycle's worth, as in pipeline's BenchmarkEngine.
const engineBatch = 10_000

// EngineCase is one engine-only measurement: a window pre-filled with
// Spec.KeysPerWindow keys (not timed), then Records timed records of the
// stream with Spec.DupRatio duplicates.
type EngineCase struct {
	Case    string // CaseEngine or CaseSweep
	Spec    workload.Spec
	Records int
	// Restart measures restart-to-ready after the timed part.
	Restart bool
	// Dir is where the state directory is made (os.TempDir when empty).
	Dir string
	// NoWAL runs the stage with the store's WAL off (statestore
	// Options.DisableWAL), reported as system SysDedupNoWAL.
	NoWAL bool
	// Ctx stops the case between two batches when it ends. The default
	// value never ends.
	Ctx context.Context
	// HeapProfile, when not empty, is where RunStage writes a heap
	// profile of the stage at the end of the pre-fill.
	HeapProfile string
	// TimedProfile, when not empty, is where RunStage writes a CPU profile
	// of the timed records alone (the pre-fill and restarts left out). It
	// cannot be combined with a profile of the whole run. The harness
	// goroutine's samples are labelled span=stage inside Process + Commit
	// and span=harness between them; the store's background goroutines
	// carry no label (go tool pprof -tags, -tagfocus).
	TimedProfile string
	// TimedTrace, when not empty, is where RunStage writes a Go execution
	// trace of the timed records alone (go tool trace): where the stage
	// goroutine waits, and for what.
	TimedTrace string
}

// settleMax bounds the wait after an engine case's timed records for the
// store's background work (spanCPU.settle): a merge of eight leaves at 100M
// keys takes a few seconds of CPU.
const settleMax = 60 * time.Second

// stopped reports the case's context error, if any.
func (c EngineCase) stopped() error {
	if c.Ctx == nil {
		return nil
	}
	return c.Ctx.Err()
}

// emitDecided tells the checker which records of a batch a system emitted.
func emitDecided(chk *workload.Checker, in []workload.Record, emit []bool) {
	for i := range in {
		if emit[i] {
			chk.Emit(in[i].ID)
		}
	}
}

func (c EngineCase) name() string {
	return fmt.Sprintf("%s keys=%s dup=%g%%", c.Case, count(uint64(c.Spec.KeysPerWindow)), c.Spec.DupRatio*100)
}

// prefill runs fresh keys through fn until the window holds
// Spec.KeysPerWindow keys.
func prefill(c EngineCase, g *workload.Generator, p *Progress, what string, fn func([]workload.Record) error) error {
	g.SetDupRatio(0)
	defer g.SetDupRatio(g.Spec().DupRatio)
	keys := uint64(g.Spec().KeysPerWindow)
	start := time.Now()
	for g.Counts().New < keys {
		recs := g.Fill(int(min(engineBatch, keys-g.Counts().New)))
		if err := fn(recs); err != nil {
			return err
		}
		if err := c.stopped(); err != nil {
			return err
		}
		p.Tick("%s: pre-filled %s of %s keys (%s keys/s)", what, count(g.Counts().New), count(keys), rate(g.Counts().New, time.Since(start)))
	}
	return nil
}

// RunStage measures dedupstream's stage on a real Pebble directory.
func RunStage(c EngineCase, p *Progress) (Result, error) {
	g, err := workload.NewGenerator(c.Spec)
	if err != nil {
		return Result{}, err
	}
	spec := g.Spec()
	dir, err := os.MkdirTemp(c.Dir, "dsbench-stage-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	// The ground truth, before the start RSS: the harness's memory, not
	// the stage's.
	chk := workload.NewChecker(uint64(spec.KeysPerWindow) + uint64(c.Records))
	mem := startMemProbe()
	cfg := pipeline.Config{Window: spec.Window, ExpectedKeys: uint(spec.KeysPerWindow)}
	// The store's memory as the job gives it: one Budget (shared block
	// cache, memtables planned from it) of the default size for the one
	// store, not a cache of the store's own.
	budget, err := statestore.NewBudget(statestore.DefaultMemory, 0)
	if err != nil {
		return Result{}, err
	}
	defer budget.Close() // after the stage's Close below: defers run last in, first out
	opts := pipeline.Options{Store: budget.Options(statestore.Options{DisableWAL: c.NoWAL}, 1)}
	// The GC target "dedupstream run" sets, for the stage's memory figures.
	defer debug.SetGCPercent(job.TuneGC())
	sys := SysDedup
	if c.NoWAL {
		sys = SysDedupNoWAL
	}
	st, err := pipeline.Open(dir, cfg, opts)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	sampler := startMemSampler(250*time.Millisecond, budget.CacheUsed)
	sampler.setPhase("pre-fill")
	defer func() {
		for _, s := range sampler.finish() {
			p.Say("%s: %s", c.name(), s)
		}
	}()
	recs := make([]pipeline.Record, 0, engineBatch)
	decs := make([]pipeline.Decision, 0, engineBatch)
	process := func(in []workload.Record) (pipeline.Counts, error) {
		recs = recs[:0]
		for i := range in {
			recs = append(recs, pipeline.Record{Record: partition.Record{Key: in[i].Key, Value: in[i].Value}, TimestampMs: in[i].TimestampMs})
		}
		var cnt pipeline.Counts
		var err error
		if decs, cnt, err = st.Process(recs, decs[:0]); err != nil {
			return cnt, err
		}
		return cnt, st.Commit(nil)
	}
	record := func(in []workload.Record) {
		for i, d := range decs {
			if d.Verdict == pipeline.Emit {
				chk.Emit(in[i].ID)
			}
		}
	}
	name := c.name() + " " + sys
	// Process CPU (stage, store worker, generator and checker together):
	// on a shared machine it is steadier than the wall-clock rates.
	cpu0, wall0 := selfCPU(), time.Now()
	if err := prefill(c, g, p, name, func(in []workload.Record) error {
		_, err := process(in)
		record(in)
		return err
	}); err != nil {
		return Result{}, err
	}
	p.Say("%s: pre-fill %.3f us of process CPU per key, %s keys/s", name,
		(selfCPU()-cpu0)*1e6/float64(spec.KeysPerWindow), rate(uint64(spec.KeysPerWindow), time.Since(wall0)))
	writeHeapProfile(c.HeapProfile, p)
	before := g.Counts()
	sampler.setPhase("timed records")
	var (
		total pipeline.Counts
		busy  time.Duration
		lat   = make([]time.Duration, 0, c.Records/engineBatch+1)
		done  int
	)
	stopProfile := timedOut{c.TimedProfile, c.TimedTrace}.start(p)
	span := startSpan()
	for done < c.Records {
		in := g.Fill(min(engineBatch, c.Records-done))
		span.enter()
		t0 := time.Now()
		cnt, err := process(in)
		d := time.Since(t0)
		span.leave()
		if err != nil {
			return Result{}, err
		}
		busy += d
		lat = append(lat, d)
		total.Add(cnt)
		record(in)
		done += len(in)
		if err := c.stopped(); err != nil {
			return Result{}, err
		}
		p.Tick("%s: %s of %s records, %s records/s", name, count(uint64(done)), count(uint64(c.Records)), rate(uint64(done), busy))
	}
	stopProfile()
	sampler.setPhase("settle")
	span.settle(settleMax)
	cpuPerRecord := (span.stage + span.between) * 1e6 / float64(done)
	p.Say("%s: timed records %.3f us of process CPU per record: %s", name, cpuPerRecord, span.String(done))
	after := g.Counts()
	base, peak := mem.peak()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res := Result{
		GoHeapSysBytes: ms.HeapSys, GoHeapAllocBytes: ms.HeapAlloc,
		Case: c.Case, System: sys, Workload: spec, KeysInWindow: spec.KeysPerWindow,
		Records:       uint64(done),
		DupRatio:      float64(after.Duplicates()-before.Duplicates()) / float64(done),
		Seconds:       busy.Seconds(),
		RecordsPerSec: float64(done) / busy.Seconds(),
		Latency:       latencyOf(fmt.Sprintf("batch of %d records (Process + Commit)", engineBatch), lat),
		RSSStartBytes: base, RSSPeakBytes: peak,
		CPUUsPerRecord:      cpuPerRecord,
		TailCPUUsPerRecord:  span.tail * 1e6 / float64(done),
		StageCPUUsPerRecord: span.stage * 1e6 / float64(done),
	}
	ps := st.Stats()
	keys := float64(spec.KeysPerWindow)
	bloomBytes := ps.FilterBytes
	res.MemBytesPerKey = float64(peak-base) / keys
	res.MemBeyondBloomPerKey = (float64(peak-base) - bloomBytes) / keys
	res.BloomBytesPerKey = bloomBytes / keys
	res.BloomFPRateEst = ps.EstimatedFPR
	if n := total.FalsePositives + total.BloomNegative; n > 0 {
		res.BloomFPRate = float64(total.FalsePositives) / float64(n)
	}
	res.StoreReadsPerRecord = float64(total.StoreReads) / float64(total.In)
	res.DiskBytesPerKey = float64(dirBytes(dir)) / keys
	if c.Restart {
		p.Say("%s: restart-to-ready", name)
		sampler.setPhase("restarts")
		t, err := measureRestart(&st, dir, cfg, opts)
		if err != nil {
			return res, err
		}
		res.CloseSec = t.close.Seconds()
		res.ReadyCrashSec, res.ReadyRebuildSec, res.ReadySnapshotSec = t.crash.Seconds(), t.rebuild.Seconds(), t.clean.Seconds()
	}
	if st != nil {
		if err := st.Close(); err != nil {
			return res, err
		}
		st = nil
	}
	res.Correct = chk.Result(after)
	res.Valid = res.Correct.OK()
	return res, nil
}

// snapshotFile is the Bloom snapshot pipeline.Stage.Close writes next to
// the store (pipeline's unexported snapshotFile). measureRestart fails
// loudly if it is not there, so a rename cannot turn the crash measurement
// into a second snapshot measurement.
const snapshotFile = "bloom.snapshot"

// restartTimes are the Open times of a full stage.
type restartTimes struct {
	close   time.Duration // Close of the running stage: what a graceful shutdown adds
	crash   time.Duration // no snapshot, the running stage's WAL to replay: kill -9
	rebuild time.Duration // the same once more, right after: the store no longer fresh from ingest
	clean   time.Duration // the Bloom snapshot of a clean Close
}

// measureRestart closes the full stage and times Open three times. First as
// after kill -9: the snapshot removed, so Open replays the running stage's
// WAL (the store keeps its WAL on, and Close flushes nothing then) and
// rebuilds the filter by scanning the store as ingest left it. Then the same
// again right after, on a store that had time to compact. Last after a
// clean Close, from the Bloom snapshot.
func measureRestart(st **pipeline.Stage, dir string, cfg pipeline.Config, opts pipeline.Options) (t restartTimes, err error) {
	first := true
	reopen := func(crash bool) (time.Duration, error) {
		t0 := time.Now()
		if err := (*st).Close(); err != nil {
			return 0, err
		}
		if first {
			t.close, first = time.Since(t0), false
		}
		*st = nil
		if crash {
			if err := os.Remove(filepath.Join(dir, snapshotFile)); err != nil {
				return 0, fmt.Errorf("simulate a crash: %w", err)
			}
		} else if _, err := os.Stat(filepath.Join(dir, snapshotFile)); err != nil {
			return 0, fmt.Errorf("no Bloom snapshot after a clean close: %w", err)
		}
		t0 = time.Now()
		s, err := pipeline.Open(dir, cfg, opts)
		if err != nil {
			return 0, err
		}
		*st = s
		return time.Since(t0), nil
	}
	if t.crash, err = reopen(true); err != nil {
		return
	}
	if t.rebuild, err = reopen(true); err != nil {
		return
	}
	t.clean, err = reopen(false)
	return
}

// RunMap measures the ceiling: exact dedup in a Go map of key hashes, no
// durability, no expiry, on the same stream.
func RunMap(c EngineCase, p *Progress) (Result, error) {
	g, err := workload.NewGenerator(c.Spec)
	if err != nil {
		return Result{}, err
	}
	spec := g.Spec()
	chk := workload.NewChecker(uint64(spec.KeysPerWindow) + uint64(c.Records))
	mem := startMemProbe()
	seen := make(map[partition.Hash]struct{}, spec.KeysPerWindow+c.Records)
	name := c.name() + " " + SysMap
	if err := prefill(c, g, p, name, func(in []workload.Record) error {
		for i := range in {
			seen[partition.HashKey(in[i].Key)] = struct{}{}
			chk.Emit(in[i].ID)
		}
		return nil
	}); err != nil {
		return Result{}, err
	}
	before := g.Counts()
	emit := make([]bool, engineBatch)
	var busy time.Duration
	done := 0
	for done < c.Records {
		in := g.Fill(min(engineBatch, c.Records-done))
		t0 := time.Now()
		for i := range in {
			h := partition.HashKey(in[i].Key)
			_, dup := seen[h]
			if !dup {
				seen[h] = struct{}{}
			}
			emit[i] = !dup
		}
		busy += time.Since(t0)
		emitDecided(chk, in, emit)
		done += len(in)
		if err := c.stopped(); err != nil {
			return Result{}, err
		}
		p.Tick("%s: %s of %s records", name, count(uint64(done)), count(uint64(c.Records)))
	}
	after := g.Counts()
	base, peak := mem.peak()
	res := Result{
		Case: c.Case, System: SysMap, Workload: spec, KeysInWindow: spec.KeysPerWindow,
		Records:       uint64(done),
		DupRatio:      float64(after.Duplicates()-before.Duplicates()) / float64(done),
		Seconds:       busy.Seconds(),
		RecordsPerSec: float64(done) / busy.Seconds(),
		RSSStartBytes: base, RSSPeakBytes: peak,
		MemBytesPerKey: float64(peak-base) / float64(spec.KeysPerWindow),
		Note:           "no durability, no expiry, no Kafka",
	}
	res.Correct = chk.Result(after)
	res.Valid = res.Correct.OK()
	return res, nil
}

// RunRedis measures the per-message baseline: one "SET key 1 NX EX window"
// round trip per record against a local redis-server. The window is
// pre-filled with pipelined SETs (not timed); the timed part is the first
// Records records of the same stream the other systems get. Redis expires
// on the wall clock, so record time plays no part; nothing expires during a
// run.
func RunRedis(c EngineCase, addr string, p *Progress) (Result, error) {
	g, err := workload.NewGenerator(c.Spec)
	if err != nil {
		return Result{}, err
	}
	spec := g.Spec()
	cl, err := resp.Dial(addr, 5*time.Second)
	if err != nil {
		return Result{}, err
	}
	defer cl.Close()
	if _, err := cl.Do("FLUSHALL"); err != nil {
		return Result{}, err
	}
	memBefore, err := resp.UsedMemory(cl)
	if err != nil {
		return Result{}, err
	}
	ttl := resp.Seconds(spec.Window)
	chk := workload.NewChecker(uint64(spec.KeysPerWindow) + uint64(c.Records))
	name := c.name() + " " + SysRedis
	keys := make([][]byte, 0, engineBatch)
	var set []bool
	if err := prefill(c, g, p, name, func(in []workload.Record) error {
		keys = keys[:0]
		for i := range in {
			keys = append(keys, in[i].Key)
		}
		var err error
		if set, err = cl.SetNXPipelined(keys, ttl, set[:0]); err != nil {
			return err
		}
		for i, ok := range set {
			if ok {
				chk.Emit(in[i].ID)
			}
		}
		return nil
	}); err != nil {
		return Result{}, err
	}
	memFull, err := resp.UsedMemory(cl)
	if err != nil {
		return Result{}, err
	}
	before := g.Counts()
	lat := make([]time.Duration, 0, c.Records)
	emit := make([]bool, engineBatch)
	var busy time.Duration
	done := 0
	for done < c.Records {
		in := g.Fill(min(engineBatch, c.Records-done))
		t0 := time.Now()
		prev := t0
		for i := range in {
			ok, err := cl.SetNX(in[i].Key, ttl)
			if err != nil {
				return Result{}, err
			}
			emit[i] = ok
			now := time.Now()
			lat = append(lat, now.Sub(prev))
			prev = now
		}
		busy += prev.Sub(t0)
		emitDecided(chk, in, emit)
		done += len(in)
		if err := c.stopped(); err != nil {
			return Result{}, err
		}
		p.Tick("%s: %s of %s records, %s records/s", name, count(uint64(done)), count(uint64(c.Records)), rate(uint64(done), busy))
	}
	after := g.Counts()
	res := Result{
		Case: c.Case, System: SysRedis, Workload: spec, KeysInWindow: spec.KeysPerWindow,
		Records:        uint64(done),
		DupRatio:       float64(after.Duplicates()-before.Duplicates()) / float64(done),
		Seconds:        busy.Seconds(),
		RecordsPerSec:  float64(done) / busy.Seconds(),
		Latency:        latencyOf("SET NX EX round trip", lat),
		MemBytesPerKey: float64(memFull-memBefore) / float64(spec.KeysPerWindow),
		Note:           "memory is redis-server's used_memory per key; record-time windows are not possible (EX is wall-clock)",
	}
	res.Correct = chk.Result(after)
	res.Valid = res.Correct.OK()
	return res, nil
}
