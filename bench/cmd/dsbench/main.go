// Command dsbench measures dedupstream against the baselines users would
// otherwise pick, on the same generated stream in the same run: the stage
// alone on a real Pebble directory (engine), a window-size sweep with
// restart-to-ready (sweep), and the real job end to end on an embedded or
// external broker next to a copy job with the same client path (e2e). The
// per-message Redis SET NX baseline runs against a redis-server the command
// starts on loopback; the Go map ceiling runs in-process.
//
//	go run ./bench/cmd/dsbench                  # the quick profile (make bench)
//	go run ./bench/cmd/dsbench -profile full    # make bench-full
//	go run ./bench/cmd/dsbench -modes e2e -brokers host:9092,...
//	go run ./bench/cmd/dsbench -modes latency -rate-frac 0.5   # end-to-end latency at a fixed rate
//
// It writes results.json (one object per measured run), results.md (median
// tables, ratios, the targets) and throughput.svg into -out.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dedupstream/dedupstream/bench/harness"
	"github.com/dedupstream/dedupstream/bench/resp"
	"github.com/dedupstream/dedupstream/bench/workload"
	"github.com/dedupstream/dedupstream/config"
)

type profile struct {
	modes                    string
	keys                     int
	dups                     string
	records, redisRecords    int
	sweep                    string
	sweepRecords             int
	mapMaxKeys, redisMaxKeys int
	e2eRecords, reps         int
	partitions, topics       int
}

var profiles = map[string]profile{
	"quick": {modes: "engine,sweep,e2e", keys: 1_000_000, dups: "0.01,0.05,0.2", records: 1_000_000, redisRecords: 100_000,
		sweep: "1M,3M", sweepRecords: 1_000_000, mapMaxKeys: 10_000_000, redisMaxKeys: 1_000_000,
		e2eRecords: 400_000, reps: 3, partitions: 4, topics: 2},
	"full": {modes: "engine,sweep,e2e", keys: 1_000_000, dups: "0.01,0.05,0.2,0.5", records: 2_000_000, redisRecords: 200_000,
		sweep: "1M,10M,100M", sweepRecords: 2_000_000, mapMaxKeys: 10_000_000, redisMaxKeys: 10_000_000,
		e2eRecords: 2_000_000, reps: 3, partitions: 4, topics: 2},
}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("dsbench", flag.ContinueOnError)
	prof := fs.String("profile", "quick", "quick (a few minutes) or full (the published figures, ~30 minutes)")
	modes := fs.String("modes", "", "comma list of engine, sweep, e2e (default: the profile's)")
	keys := fs.String("keys", "", "engine: keys in the window (default: the profile's)")
	dups := fs.String("dups", "", "engine: comma list of duplicate ratios")
	records := countVar(fs, "records", "engine: timed records per case")
	redisRecords := countVar(fs, "redis-records", "engine: timed records of the Redis baseline (a prefix of the same stream)")
	sweep := fs.String("sweep", "", "sweep: comma list of keys in the window, e.g. 1M,10M,100M")
	sweepRecords := countVar(fs, "sweep-records", "sweep: timed records per point")
	sweepDup := fs.Float64("sweep-dup", 0.05, "sweep: duplicate ratio")
	sweepNoRestart := fs.Bool("sweep-no-restart", false, "sweep: skip the restart-to-ready measurement after each point (its memory is not part of the point's RSS figures)")
	mapMax := fs.String("map-max-keys", "", "run the map ceiling only up to this many keys")
	redisMax := fs.String("redis-max-keys", "", "run the Redis baseline only up to this many keys")
	noRedis := fs.Bool("no-redis", false, "skip the Redis baseline")
	noWAL := fs.Bool("nowal", false, "engine: also run the stage with the store's WAL off")
	e2eRecords := countVar(fs, "e2e-records", "e2e: records produced to the raw topics")
	reps := fs.Int("reps", 0, "e2e: runs of each job (medians are reported)")
	partitions := fs.Int("partitions", 0, "e2e: partitions of the raw and output topics")
	topics := fs.Int("topics", 0, "e2e: raw topics")
	brokers := fs.String("brokers", "", "e2e: external brokers host:port,...; empty starts an embedded broker")
	replication := fs.Int("replication", -1, "e2e: replication factor of created topics (-1: the broker default)")
	interval := fs.Duration("commit-interval", 100*time.Millisecond, "e2e: commit interval of both jobs")
	maxRecords := fs.Int("commit-max-records", 50_000, "e2e: records per commit cycle of both jobs")
	fetchBytes := fs.String("fetch-max-bytes", "", "e2e, kafka: per-partition fetch limit of both jobs (default the job's, "+config.DefaultFetchPartitionMaxBytes.String()+")")
	maxInFlight := fs.Int("max-in-flight", 0, "e2e, kafka: produce requests in flight per transaction of both jobs (default the job's, 5; 1: one at a time)")
	noAhead := fs.Bool("no-fetch-ahead", false, "e2e, kafka: turn the job's fetch.ahead off")
	fetchMinBytes := fs.String("fetch-min-bytes", "", "e2e, kafka, latency: dedupstream's fetch.min_bytes (default the job's: the partition fetch limit; 1 answers at once)")
	batchBytes := fs.String("produce-batch-bytes", "", "e2e, kafka: produce batch limit of both jobs (default the job's, "+config.DefaultProduceBatchMaxBytes.String()+")")
	routes := fs.String("routes", "", "kafka: named broker lists, NAME=host:port,...;NAME=... (the first creates topics and reads outputs back unless -setup-route)")
	setupRoute := fs.String("setup-route", "", "kafka: the route that creates topics, produces the stream and reads outputs back")
	arms := fs.String("arms", "", "kafka: what to measure, ARM;ARM...; ARM is LABEL=SYSTEM@ROUTE[,interval=D][,fetch=SIZE][,batch=SIZE][,inflight=N][,ahead=BOOL], SYSTEM one of dedupstream, copy-job, producer-perf, consumer-perf")
	brokerPIDs := fs.String("broker-pids", "", "kafka: pids of the broker processes, comma-separated, for their CPU time")
	kafkaLib := fs.String("kafka-lib", ".kafka/lib", "kafka: directory of the broker's jars (kafka-tools among them)")
	zipf := fs.Float64("zipf", 0, "Zipf exponent of far duplicates (0 uniform, > 1 hot keys)")
	payload := fs.Int("payload", 100, "record value bytes")
	window := fs.Duration("window", 24*time.Hour, "dedup window")
	seed := fs.Uint64("seed", 1, "workload seed")
	out := fs.String("out", "bench/results/latest", "output directory")
	dir := fs.String("dir", "", "parent of state directories (default the system temp dir)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	timedProfile := fs.String("timed-cpuprofile", "", "sweep: write a CPU profile of each point's timed records alone to this path plus -KEYS.pprof; e2e: of each job run's timed span to this path plus -SYSTEM-REP.pprof (not with -cpuprofile)")
	timedTrace := fs.String("timed-trace", "", "sweep: write a Go execution trace of each point's timed records alone to this path plus -KEYS.trace; e2e: of each job run's timed span to this path plus -SYSTEM-REP.trace (go tool trace)")
	heapProfile := fs.String("heapprofile", "", "sweep: write a heap profile of the stage at the end of each pre-fill to this path plus -KEYS.pprof")
	latRate := fs.Float64("rate", 0, "latency: input records/s produced while the job runs (0: -rate-frac of the maximum)")
	latFrac := fs.Float64("rate-frac", 0.5, "latency: without -rate, this share of the job's records/s measured first by e2e in the same run")
	latFor := fs.Duration("latency-duration", 20*time.Second, "latency: how long the paced input lasts (records = rate x duration)")
	jobProc := fs.Bool("job-process", false, "kafka, latency: run dedupstream and the copy job each in a process of its own (dsbench itself), so job CPU is the job's alone and the job has its cores to itself")
	jobCPUs := fs.String("job-cpus", "", "kafka, latency, with -job-process: pin the job's process to these cores (taskset -c list)")
	jobProfile := fs.String("job-cpuprofile", "", "kafka, with -job-process: each job process writes a CPU profile of its timed span to PREFIX-ARM-REP.pprof")
	child := fs.String(harness.ChildFlag, "", "internal: run as the job process of -job-process, from this spec file")
	render := fs.String("render", "", "measure nothing: merge these results.json files (comma list) and write the JSON, tables and plot into -out")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *child != "" {
		return harness.RunChild(*child)
	}
	p, ok := profiles[*prof]
	if !ok {
		fmt.Fprintf(os.Stderr, "dsbench: unknown profile %q (quick or full)\n", *prof)
		return 2
	}
	or := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	ors := func(v, def string) string {
		if v != "" {
			return v
		}
		return def
	}
	engineKeys, err := parseCount(ors(*keys, strconv.Itoa(p.keys)))
	if err != nil {
		return usage(err)
	}
	dupList, err := parseFloats(ors(*dups, p.dups))
	if err != nil {
		return usage(err)
	}
	sweepKeys, err := parseCounts(ors(*sweep, p.sweep))
	if err != nil {
		return usage(err)
	}
	mapMaxKeys, err := parseCount(ors(*mapMax, strconv.Itoa(p.mapMaxKeys)))
	if err != nil {
		return usage(err)
	}
	redisMaxKeys, err := parseCount(ors(*redisMax, strconv.Itoa(p.redisMaxKeys)))
	if err != nil {
		return usage(err)
	}
	modeList := strings.Split(ors(*modes, p.modes), ",")
	for _, m := range modeList {
		if !slices.Contains([]string{"engine", "sweep", "e2e", "kafka", "latency"}, m) {
			return usage(fmt.Errorf("unknown mode %q (engine, sweep, e2e, kafka, latency)", m))
		}
	}
	fetchMax, err := optSize(*fetchBytes)
	if err != nil {
		return usage(fmt.Errorf("-fetch-max-bytes: %v", err))
	}
	batchMax, err := optSize(*batchBytes)
	if err != nil {
		return usage(fmt.Errorf("-produce-batch-bytes: %v", err))
	}
	fetchMin, err := optSize(*fetchMinBytes)
	if err != nil {
		return usage(fmt.Errorf("-fetch-min-bytes: %v", err))
	}
	var jp *harness.JobProcess
	if *jobProc {
		exe, err := os.Executable()
		if err != nil {
			return usage(fmt.Errorf("-job-process: %v", err))
		}
		jp = &harness.JobProcess{Exe: exe, CPUs: *jobCPUs, CPUProfile: *jobProfile}
	}
	var kc harness.KafkaCase
	if slices.Contains(modeList, "kafka") {
		if kc, err = kafkaCase(*routes, *setupRoute, *arms, *brokerPIDs); err != nil {
			return usage(err)
		}
		kc.KafkaLib = *kafkaLib
		kc.JobProc = jp
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "dsbench:", err)
		return 1
	}
	if *render != "" {
		return renderRuns(strings.Split(*render, ","), *out)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dsbench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "dsbench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	prog := harness.NewProgress(os.Stderr, 2*time.Second)
	runInfo := &harness.Run{Started: time.Now().UTC().Format(time.RFC3339), Command: "dsbench " + strings.Join(args, " "),
		Host: harness.Host{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, Model: cpuModel()}}
	save := func() error {
		if err := runInfo.WriteJSON(filepath.Join(*out, "results.json")); err != nil {
			return err
		}
		rows := harness.Summarise(runInfo.Results)
		var md strings.Builder
		harness.WriteMarkdown(&md, runInfo, rows)
		if err := os.WriteFile(filepath.Join(*out, "results.md"), []byte(md.String()), 0o644); err != nil {
			return err
		}
		var svg strings.Builder
		harness.WritePlot(&svg, rows)
		return os.WriteFile(filepath.Join(*out, "throughput.svg"), []byte(svg.String()), 0o644)
	}
	add := func(r harness.Result, err error) error {
		if err != nil {
			return err
		}
		runInfo.Results = append(runInfo.Results, r)
		valid := "valid"
		if !r.Valid {
			valid = "INVALID: " + r.Correct.String()
		}
		prog.Say("== %s %s keys=%d dup=%g%%: %.0f records/s (%s)", r.Case, r.System, r.KeysInWindow, r.Workload.DupRatio*100, r.RecordsPerSec, valid)
		return save()
	}

	var redisAddr string
	needRedis := !*noRedis && (slices.Contains(modeList, "engine") || slices.Contains(modeList, "sweep"))
	if needRedis {
		srv, err := resp.StartServer()
		switch {
		case errors.Is(err, resp.ErrNoServer):
			prog.Say("redis-server not installed: the Redis baseline is skipped (apt-get install -y redis-server)")
		case err != nil:
			fmt.Fprintln(os.Stderr, "dsbench:", err)
			return 1
		default:
			defer srv.Close()
			redisAddr = srv.Addr
			prog.Say("redis-server (pid %d) on %s, no persistence", srv.Pid(), srv.Addr)
		}
	}
	spec := func(k int, dup float64) workload.Spec {
		return workload.Spec{Seed: *seed, KeysPerWindow: k, Window: *window, DupRatio: dup, Zipf: *zipf, PayloadBytes: *payload}
	}
	engineSet := func(c harness.EngineCase, withMap, withRedis bool) error {
		if err := add(harness.RunStage(c, prog)); err != nil {
			return err
		}
		if *noWAL && c.Case == harness.CaseEngine {
			nc := c
			nc.NoWAL = true
			if err := add(harness.RunStage(nc, prog)); err != nil {
				return err
			}
		}
		if withMap {
			if err := add(harness.RunMap(c, prog)); err != nil {
				return err
			}
		}
		if withRedis && redisAddr != "" {
			rc := c
			rc.Records = or(*redisRecords, p.redisRecords)
			if err := add(harness.RunRedis(rc, redisAddr, prog)); err != nil {
				return err
			}
		}
		return ctx.Err()
	}
	// e2eCase is the end-to-end case of n records the flags describe; the
	// duplicate ratio is -dups' first or dup, the raw topics -topics or
	// topics.
	e2eCase := func(n int, dup float64, topics0 int) harness.E2ECase {
		// The window holds four times the stream's keys, so that one
		// fetch (up to a few thousand records per partition) spans well
		// under 1 % of it in record time: a batch is judged at its
		// largest timestamp (see package workload).
		sp := spec(4*n, dup)
		if len(dupList) > 0 && *dups != "" {
			sp.DupRatio = dupList[0]
		}
		sp.Partitions, sp.Topics = or(*partitions, p.partitions), or(*topics, topics0)
		c := harness.E2ECase{Spec: sp, Records: n, Reps: or(*reps, p.reps), Replication: int16(*replication),
			Interval: *interval, MaxRecords: *maxRecords, Dir: *dir, FetchMaxBytes: fetchMax, FetchMinBytes: fetchMin, BatchMaxBytes: batchMax,
			MaxInFlight: *maxInFlight, NoFetchAhead: *noAhead, TimedProfile: *timedProfile, TimedTrace: *timedTrace}
		if *brokers != "" {
			c.Brokers = strings.Split(*brokers, ",")
		} else {
			c.Replication = 1
		}
		return c
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "dsbench:", err)
		save()
		return 1
	}
	for _, mode := range modeList {
		switch mode {
		case "engine":
			for _, d := range dupList {
				c := harness.EngineCase{Case: harness.CaseEngine, Spec: spec(engineKeys, d), Records: or(*records, p.records), Dir: *dir, Ctx: ctx}
				if err := engineSet(c, engineKeys <= mapMaxKeys, engineKeys <= redisMaxKeys); err != nil {
					return fail(err)
				}
			}
		case "sweep":
			for _, k := range sweepKeys {
				c := harness.EngineCase{Case: harness.CaseSweep, Spec: spec(k, *sweepDup), Records: or(*sweepRecords, p.sweepRecords), Restart: !*sweepNoRestart, Dir: *dir, Ctx: ctx}
				if *heapProfile != "" {
					c.HeapProfile = fmt.Sprintf("%s-%d.pprof", *heapProfile, k)
				}
				if *timedProfile != "" {
					c.TimedProfile = fmt.Sprintf("%s-%d.pprof", *timedProfile, k)
				}
				if *timedTrace != "" {
					c.TimedTrace = fmt.Sprintf("%s-%d.trace", *timedTrace, k)
				}
				if err := engineSet(c, k <= mapMaxKeys, k <= redisMaxKeys); err != nil {
					return fail(err)
				}
			}
		case "e2e":
			rs, err := harness.RunE2E(ctx, e2eCase(or(*e2eRecords, p.e2eRecords), 0.05, p.topics), prog)
			for _, r := range rs {
				add(r, nil)
			}
			if err != nil {
				return fail(err)
			}
		case "latency":
			c := harness.LatencyCase{Rate: *latRate, JobProc: jp}
			if c.Rate <= 0 {
				maxRate, ok := harness.MedianRate(runInfo.Results, harness.SysDedup, harness.CaseE2EEmbedded, harness.CaseE2EExternal)
				if !ok {
					// No e2e mode earlier in this run: measure the maximum now.
					mc := e2eCase(or(*e2eRecords, p.e2eRecords), 0.05, p.topics)
					mc.Reps = 1
					rs, err := harness.RunE2E(ctx, mc, prog)
					for _, r := range rs {
						add(r, nil)
					}
					if err != nil {
						return fail(err)
					}
					maxRate, _ = harness.MedianRate(runInfo.Results, harness.SysDedup, harness.CaseE2EEmbedded, harness.CaseE2EExternal)
				}
				c.Rate = *latFrac * maxRate
				prog.Say("latency: %.2f x the job's %.0f records/s measured end to end = %.0f records/s", *latFrac, maxRate, c.Rate)
			}
			c.E2E = e2eCase(max(1, int(c.Rate*latFor.Seconds())), 0.05, p.topics)
			rs, err := harness.RunLatency(ctx, c, prog)
			for _, r := range rs {
				add(r, nil)
			}
			if err != nil {
				return fail(err)
			}
		case "kafka":
			kc.E2E = e2eCase(or(*e2eRecords, p.e2eRecords), 0.2, 1)
			kc.E2E.Brokers, kc.E2E.Replication = nil, int16(*replication)
			rs, err := harness.RunKafka(ctx, kc, prog)
			for _, r := range rs {
				add(r, nil)
			}
			if err != nil {
				return fail(err)
			}
		}
	}
	if err := save(); err != nil {
		return fail(err)
	}
	md, _ := os.ReadFile(filepath.Join(*out, "results.md"))
	os.Stdout.Write(md)
	fmt.Printf("\nwritten: %s\n", strings.Join([]string{filepath.Join(*out, "results.json"), filepath.Join(*out, "results.md"), filepath.Join(*out, "throughput.svg")}, ", "))
	for _, r := range runInfo.Results {
		if !r.Valid {
			fmt.Fprintf(os.Stderr, "dsbench: %s %s keys=%d is INVALID: %v\n", r.Case, r.System, r.KeysInWindow, r.Correct)
			return 1
		}
	}
	return 0
}

// renderRuns merges the results of earlier runs into one report. The
// merged run's Started and Command list every source run.
func renderRuns(paths []string, out string) int {
	merged := &harness.Run{}
	for i, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dsbench:", err)
			return 1
		}
		var r harness.Run
		if err := json.Unmarshal(b, &r); err != nil {
			fmt.Fprintf(os.Stderr, "dsbench: %s: %v\n", path, err)
			return 1
		}
		if i > 0 {
			merged.Started += "; "
			merged.Command += "; "
		}
		merged.Started += r.Started
		merged.Command += r.Command
		merged.Host = r.Host
		merged.Results = append(merged.Results, r.Results...)
	}
	if err := merged.WriteJSON(filepath.Join(out, "results.json")); err != nil {
		fmt.Fprintln(os.Stderr, "dsbench:", err)
		return 1
	}
	rows := harness.Summarise(merged.Results)
	var md, svg strings.Builder
	harness.WriteMarkdown(&md, merged, rows)
	harness.WritePlot(&svg, rows)
	if err := errors.Join(os.WriteFile(filepath.Join(out, "results.md"), []byte(md.String()), 0o644),
		os.WriteFile(filepath.Join(out, "throughput.svg"), []byte(svg.String()), 0o644)); err != nil {
		fmt.Fprintln(os.Stderr, "dsbench:", err)
		return 1
	}
	os.Stdout.WriteString(md.String())
	return 0
}

func optSize(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	v, err := config.ParseByteSize(s)
	return int(v), err
}

// kafkaCase reads the kafka mode's flags: -routes, -setup-route, -arms and
// -broker-pids.
func kafkaCase(routes, setup, arms, pids string) (harness.KafkaCase, error) {
	kc := harness.KafkaCase{Routes: map[string][]string{}, Setup: setup}
	for r := range strings.SplitSeq(routes, ";") {
		name, list, ok := strings.Cut(strings.TrimSpace(r), "=")
		if !ok || name == "" || list == "" {
			return kc, fmt.Errorf("-routes: want NAME=host:port,...;..., got %q", r)
		}
		kc.Routes[name] = strings.Split(list, ",")
		if kc.Setup == "" {
			kc.Setup = name
		}
	}
	for a := range strings.SplitSeq(arms, ";") {
		// The label may hold "=" (dedupstream fetch=1MiB): the system is
		// what lies between the last "=" before "@" and the "@".
		a = strings.TrimSpace(a)
		at := strings.Index(a, "@")
		eq := strings.LastIndex(a[:max(at, 0)], "=")
		if at < 0 || eq <= 0 {
			return kc, fmt.Errorf("-arms: want LABEL=SYSTEM@ROUTE[,interval=D][,fetch=SIZE][,batch=SIZE], got %q", a)
		}
		label, sys, rest := a[:eq], a[eq+1:at], a[at+1:]
		if label == "" {
			return kc, fmt.Errorf("-arms: want LABEL=SYSTEM@ROUTE[,interval=D][,fetch=SIZE][,batch=SIZE], got %q", a)
		}
		opts := strings.Split(rest, ",")
		arm := harness.KafkaArm{Name: label, System: sys, Route: opts[0]}
		if !slices.Contains([]string{harness.SysDedup, harness.SysCopy, harness.SysProducerPerf, harness.SysConsumerPerf}, sys) {
			return kc, fmt.Errorf("-arms: %s: unknown system %q", label, sys)
		}
		if _, ok := kc.Routes[arm.Route]; !ok {
			return kc, fmt.Errorf("-arms: %s: route %q is not in -routes", label, arm.Route)
		}
		for _, o := range opts[1:] {
			k, v, _ := strings.Cut(o, "=")
			var err error
			switch k {
			case "interval":
				arm.Interval, err = time.ParseDuration(v)
			case "fetch":
				arm.FetchMaxBytes, err = optSize(v)
			case "batch":
				arm.BatchMaxBytes, err = optSize(v)
			case "inflight":
				arm.MaxInFlight, err = strconv.Atoi(v)
			case "ahead":
				var on bool
				on, err = strconv.ParseBool(v)
				arm.NoFetchAhead = !on
			default:
				err = fmt.Errorf("unknown option %q (interval, fetch, batch, inflight, ahead)", k)
			}
			if err != nil {
				return kc, fmt.Errorf("-arms: %s: %v", label, err)
			}
		}
		kc.Arms = append(kc.Arms, arm)
	}
	if pids != "" {
		for f := range strings.SplitSeq(pids, ",") {
			pid, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return kc, fmt.Errorf("-broker-pids: %q is not a pid", f)
			}
			kc.BrokerPIDs = append(kc.BrokerPIDs, pid)
		}
	}
	return kc, nil
}

// countFlag is an int flag that also reads 10k, 2M and 1G.
type countFlag int

func (c *countFlag) String() string { return strconv.Itoa(int(*c)) }

func (c *countFlag) Set(s string) error {
	v, err := parseCount(s)
	*c = countFlag(v)
	return err
}

func countVar(fs *flag.FlagSet, name, usage string) *int {
	var c countFlag
	fs.Var(&c, name, usage+" (10k, 2M, ...)")
	return (*int)(&c)
}

func usage(err error) int {
	fmt.Fprintln(os.Stderr, "dsbench:", err)
	return 2
}

// parseCount reads 1000000, 1M, 10k or 1G.
func parseCount(s string) (int, error) {
	s = strings.TrimSpace(s)
	mult := 1
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mult, s = 1_000, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1_000_000, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mult, s = 1_000_000_000, s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad count %q", s)
	}
	return int(v * float64(mult)), nil
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		v, err := parseCount(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
