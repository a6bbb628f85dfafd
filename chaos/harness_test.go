package chaos

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/segmentio/kafka-go"
)

// Environment of the suite.
const (
	envMode = "CHAOS"      // "short" or "full"
	envSeed = "CHAOS_SEED" // replays a schedule
	envOut  = "CHAOS_OUT"  // where schedules are written; default ../.kafka/chaos
)

const parts = 4

// dedupBin is the dedupstream command, built once by TestMain when the
// suite runs.
var dedupBin string

func TestMain(m *testing.M) {
	if os.Getenv(envMode) != "" {
		dir, err := os.MkdirTemp("", "chaos-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		dedupBin = filepath.Join(dir, "dedupstream")
		build := exec.Command("go", "build", "-o", dedupBin, "github.com/dedupstream/dedupstream/cmd/dedupstream")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: build dedupstream:", err)
			os.Exit(1)
		}
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// run is one fault run: its seed, schedule log, topics and workload.
type run struct {
	t       *testing.T
	full    bool
	seed    uint64
	rng     *rand.Rand
	start   time.Time
	log     *os.File
	logPath string
	brokers []string
	raw     string
	out     string
	dlq     string
	id      string // job id: consumer group and transactional id prefix
	dir     string
	// memtable is the state store's memtable size; small ones flush (and
	// sync) often.
	memtable string
	// stateDir is the job's state directory.
	stateDir string
	// produce, when set, is the job config's produce section (a YAML flow
	// mapping).
	produce string
	mu      sync.Mutex
}

// begin skips unless the suite was asked for, then sets up a run: seed,
// schedule file, fresh topics on the cluster.
func begin(t *testing.T) *run {
	mode := os.Getenv(envMode)
	if mode == "" {
		t.Skip("fault suite: runs with CHAOS=short|full and KAFKA_BROKERS naming a 3-broker cluster (make chaos)")
	}
	if mode != "short" && mode != "full" {
		t.Fatalf("%s=%q: want short or full", envMode, mode)
	}
	brokers := kafkatest.External()
	if len(brokers) < 3 {
		t.Fatalf("the fault suite needs KAFKA_BROKERS to name 3 brokers (make kafka-up), got %q", os.Getenv(kafkatest.EnvBrokers))
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, s, err)
		}
		seed = v
	}
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	r := &run{t: t, full: mode == "full", seed: seed, rng: rand.New(rand.NewPCG(seed, h.Sum64())),
		start: time.Now(), brokers: brokers, dir: t.TempDir(), memtable: "1MiB"}
	r.stateDir = filepath.Join(r.dir, "state")
	outDir := os.Getenv(envOut)
	if outDir == "" {
		outDir = filepath.Join("..", ".kafka", "chaos")
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.logPath, _ = filepath.Abs(filepath.Join(outDir, fmt.Sprintf("%s-%d.log", t.Name(), seed)))
	f, err := os.Create(r.logPath)
	if err != nil {
		t.Fatal(err)
	}
	r.log = f
	replay := fmt.Sprintf("CHAOS=%s CHAOS_SEED=%d make chaos CHAOS_RUN='^%s$'", mode, seed, t.Name())
	r.event("%s mode=%s seed=%d brokers=%s", t.Name(), mode, seed, strings.Join(brokers, ","))
	r.event("replay: %s", replay)
	t.Cleanup(func() {
		if t.Failed() {
			r.event("FAILED; schedule in %s", r.logPath)
			fmt.Fprintf(os.Stderr, "\n%s FAILED (seed %d). Schedule: %s\nReplay: %s\n\n", t.Name(), seed, r.logPath, replay)
		} else {
			r.event("passed")
		}
		f.Close()
	})
	r.id = kafkatest.TopicName("chaos-" + strings.ToLower(strings.TrimPrefix(t.Name(), "Test")))
	r.raw, r.out, r.dlq = r.id+"-raw", r.id+"-out", r.id+"-dlq"
	kafkatest.CreateTopics(t, brokers, parts, r.raw, r.out)
	kafkatest.CreateTopics(t, brokers, 1, r.dlq)
	return r
}

// n picks the short or the full iteration count.
func (r *run) n(short, full int) int {
	if r.full {
		return full
	}
	return short
}

// event records one line of the schedule: in the test log and the file.
func (r *run) event(format string, args ...any) {
	line := fmt.Sprintf("[+%7.2fs] %s", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t.Log(line)
	if r.log != nil {
		fmt.Fprintln(r.log, line)
	}
}

// intn draws from the run's seeded source.
func (r *run) intn(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.IntN(n)
}

// between draws a duration in [lo, hi).
func (r *run) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.intn(int(hi-lo)))
}

// workload makes the run's input: keys first records, a replay of a
// quarter of them, resends, redeliveries and poison records.
func (r *run) workload(keys int) *jobtest.Workload {
	w := jobtest.New(jobtest.Spec{Topic: r.raw, Partitions: parts, Keys: keys, Replay: keys / 4, Seed: r.seed})
	r.event("workload: %d records, %d keys, %d poison", len(w.Records), len(w.First), w.Poison)
	return w
}

// producer returns the independent writer of the input.
func (r *run) producer() *jobtest.Producer {
	p, err := jobtest.NewProducer(r.brokers)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(p.Close)
	return p
}

func (r *run) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	r.t.Cleanup(cancel)
	return ctx
}

// configFile writes the job's config, owning every partition, and returns
// its path.
func (r *run) configFile(name string) string {
	return r.configFileWith(name, "{partitions: [0, 1, 2, 3]}", r.stateDir)
}

// configFileWith writes the job's config with the given assignment (a YAML
// flow mapping) and state directory and returns its path.
func (r *run) configFileWith(name, assignment, stateDir string) string {
	path := filepath.Join(r.dir, name+".yaml")
	cfg := fmt.Sprintf(`job: {id: %s}
kafka: {brokers: [%s], transaction_timeout: 20s}
input: {topics: [%s]}
output: {topic: %s, dlq_topic: %s}
assignment: %s
dedup: {key: ["json:order_id"], expected_keys: 100000}
state: {dir: %s, memory: 64MiB, memtable_size: %s}
commit: {interval: 50ms, max_records: 1000, shutdown_timeout: 20s}
log: {level: info, format: text}
metrics: {listen: "127.0.0.1:0"}
`, r.id, strings.Join(r.brokers, ", "), r.raw, r.out, r.dlq, assignment, stateDir, r.memtable)
	if r.produce != "" {
		cfg += "produce: " + r.produce + "\n"
	}
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return path
}

// inproc is the job run in this process.
type inproc struct {
	job  *job.Job
	stop context.CancelFunc
	done chan error
}

// startJob runs the job in this process with opts; mod may change the
// defaults (short retries, a warn-level logger into the test log).
func (r *run) startJob(mod func(*job.Options)) *inproc {
	r.t.Helper()
	cfg, err := config.Load(r.configFile("inproc"))
	if err != nil {
		r.t.Fatalf("load config:\n%v", err)
	}
	tr := &kafka.Transport{ClientID: "chaos", DialTimeout: 2 * time.Second}
	r.t.Cleanup(tr.CloseIdleConnections)
	opts := job.Options{
		Logger:         slog.New(slog.NewTextHandler(r.jobLog(), &slog.HandlerOptions{Level: slog.LevelInfo})),
		Transport:      tr,
		Backoff:        50 * time.Millisecond,
		MaxBackoff:     time.Second,
		RequestTimeout: 3 * time.Second,
		RetryTimeout:   15 * time.Second,
	}
	if mod != nil {
		mod(&opts)
	}
	j, err := job.New(cfg, opts)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &inproc{job: j, stop: cancel, done: make(chan error, 1)}
	go func() { p.done <- j.Run(ctx) }()
	r.t.Cleanup(func() {
		cancel()
		select {
		case err := <-p.done:
			p.done <- err
		case <-time.After(30 * time.Second):
		}
	})
	return p
}

// jobLog opens the in-process job's log next to the schedule: every run of
// the test appends to it.
func (r *run) jobLog() io.Writer {
	path := strings.TrimSuffix(r.logPath, ".log") + ".job.log"
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { f.Close() })
	r.event("job log: %s", path)
	return f
}

// finish stops an in-process job like SIGTERM does; it must exit cleanly.
func (r *run) finish(p *inproc) {
	r.t.Helper()
	p.stop()
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			r.t.Fatalf("job exited with %v after its context was cancelled, want a clean stop", err)
		}
	case <-time.After(40 * time.Second):
		r.t.Fatal("job did not stop within 40s of cancel")
	}
}

// waitCaught waits until the job committed everything produced, failing
// when done yields (the job exited) or timeout passes.
func (r *run) waitCaught(prod *jobtest.Producer, done chan error, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, committed, err := prod.Caught(r.ctx(10*time.Second), r.id, r.raw, parts, 1)
		if err == nil && ok {
			return
		}
		select {
		case err := <-done:
			done <- err
			r.t.Fatalf("job exited before it caught up: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("job did not commit all input within %v: committed %v of %v (last error %v)", timeout, committed, prod.End[r.raw], err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// progress is the fraction of the total input (total records) committed.
func (r *run) progress(prod *jobtest.Producer, total int) float64 {
	c, err := prod.Committed(r.ctx(10*time.Second), r.id, r.raw, parts)
	if err != nil {
		return 0
	}
	var n int64
	for _, off := range c {
		n += off
	}
	return float64(n) / float64(total)
}

// verify checks G1 and G2 with kgo (and, given the job's counters, the
// accounting identity against them), then cross-checks the output's key
// counts with kcat.
func (r *run) verify(w *jobtest.Workload, stats *job.Stats) {
	r.t.Helper()
	rep, err := w.Verify(r.ctx(60*time.Second), r.brokers, r.out, r.dlq, parts)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, p := range rep.Problems {
		r.t.Error(p)
	}
	if rep.In != rep.Out+w.Dropped()+rep.DLQ {
		r.t.Errorf("G2: in %d != out %d + dropped %d + dlq %d", rep.In, rep.Out, w.Dropped(), rep.DLQ)
	}
	if stats != nil {
		for _, p := range w.CheckAccounting(*stats, rep.Out, rep.DLQ) {
			r.t.Error("accounting: " + p)
		}
	}
	r.event("kgo read_committed: in=%d out=%d dropped=%d dlq=%d escaped=%d lost=%d", rep.In, rep.Out, w.Dropped(), rep.DLQ, rep.Escaped, rep.Lost)
	r.kcatCheck(w, rep.Out)
}

// kcatCheck reads the output with kcat (librdkafka, read_committed) and
// checks that every business key appears exactly once and nothing else.
func (r *run) kcatCheck(w *jobtest.Workload, wantOut int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kcat", "-C", "-b", strings.Join(r.brokers, ","), "-t", r.out,
		"-X", "isolation.level=read_committed", "-o", "beginning", "-e", "-q", "-f", `%k\n`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		r.t.Fatalf("kcat: %v\n%s", err, stderr.String())
	}
	counts := map[string]int{}
	for key := range strings.Lines(string(out)) {
		key = strings.TrimSuffix(key, "\n")
		if key == "dedupstream.jobtest.sentinel" {
			continue
		}
		counts[key]++
	}
	var bad []string
	total := 0
	for key, n := range counts {
		total += n
		if _, ok := w.First[key]; !ok || n != 1 {
			bad = append(bad, fmt.Sprintf("%s x%d", key, n))
		}
	}
	for key := range w.First {
		if counts[key] == 0 {
			bad = append(bad, key+" x0")
		}
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		r.t.Errorf("kcat: %d keys with a count other than 1 (or unknown): %v", len(bad), bad[:min(len(bad), 20)])
	}
	if total != wantOut {
		r.t.Errorf("kcat read %d output records, kgo %d", total, wantOut)
	}
	r.event("kcat read_committed: %d output records, %d distinct keys, %d bad", total, len(counts), len(bad))
}
