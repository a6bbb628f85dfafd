package job_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/dedupstream/dedupstream/partition"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const partitions = 4

// env is a cluster with the job's topics and a kgo producer that writes
// the input independently of the job. The cluster is an embedded one, or
// the brokers KAFKA_BROKERS names; topic names and the job id are unique
// per test because a real cluster keeps them between runs.
type env struct {
	t             *testing.T
	cluster       *kfake.Cluster // nil with external brokers
	brokers       []string
	raw, out, dlq string
	jobID         string
	prod          *jobtest.Producer
	dir           string
	// secured brokers: the kafka config lines of the job (tls, sasl) and
	// the options of the independent kgo clients. With kafkaYAML set, the
	// job builds its own Transport and Dialer from the config.
	kafkaYAML  string
	clientOpts []kgo.Opt
}

func newEnv(t *testing.T) *env {
	return newSecureEnv(t, nil, "", nil)
}

// newSecureEnv is newEnv on an embedded cluster started with clusterOpts
// (SASL, TLS); kafkaYAML and clientOpts are how the job and the test's
// clients reach it.
func newSecureEnv(t *testing.T, clusterOpts []kfake.Opt, kafkaYAML string, clientOpts []kgo.Opt) *env {
	e := &env{t: t, brokers: kafkatest.External(), dir: t.TempDir(), jobID: kafkatest.TopicName("orders-dedup"),
		kafkaYAML: kafkaYAML, clientOpts: clientOpts}
	if e.brokers == nil || clusterOpts != nil {
		e.cluster = kafkatest.NewCluster(t, clusterOpts...)
		e.brokers = e.cluster.ListenAddrs()
	}
	e.raw, e.out = e.topic("orders-raw", partitions), e.topic("orders", partitions)
	e.dlq = e.topic("orders-dlq", 1)
	p, err := jobtest.NewProducer(e.brokers, e.clientOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	e.prod = p
	return e
}

// topic creates a topic named after prefix and returns its name.
func (e *env) topic(prefix string, partitions int32) string {
	name := kafkatest.TopicName(prefix)
	kafkatest.CreateTopicsWith(e.t, kafkatest.NewClient(e.t, e.brokers, e.clientOpts...), partitions, name)
	return name
}

func (e *env) workload(seed uint64, keys, replay int) *jobtest.Workload {
	return jobtest.New(jobtest.Spec{Topic: e.raw, Partitions: partitions, Keys: keys, Replay: replay, Seed: seed})
}

func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *env) produce(recs []*kgo.Record) {
	e.t.Helper()
	if err := e.prod.Produce(e.ctx(30*time.Second), recs); err != nil {
		e.t.Fatal(err)
	}
}

// config writes a job config file and loads it the way the CLI does.
func (e *env) config(parts string, topics ...string) *config.Config {
	e.t.Helper()
	path := filepath.Join(e.dir, "job.yaml")
	yaml := fmt.Sprintf(`job: {id: %s}
kafka:
  brokers: [%q]
  transaction_timeout: 20s
%s
input: {topics: [%s]}
output: {topic: %s, dlq_topic: %s}
assignment: {partitions: [%s]}
dedup:
  key: ["json:order_id"]
  expected_keys: 50000
state:
  dir: %s
  memory: 64MiB
  memtable_size: 1MiB
commit: {interval: 50ms, max_records: 2000, shutdown_timeout: 10s}
`, e.jobID, e.brokers[0], e.kafkaYAML, strings.Join(append([]string{e.raw}, topics...), ", "), e.out, e.dlq, parts, filepath.Join(e.dir, "state"))
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		e.t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		e.t.Fatalf("load config:\n%v", err)
	}
	return cfg
}

// running is one started job.
type running struct {
	job    *job.Job
	cancel context.CancelFunc
	done   chan error
}

func (e *env) start(cfg *config.Config, mod ...func(*job.Options)) *running {
	e.t.Helper()
	tr := &kafka.Transport{ClientID: "job-test", DialTimeout: 2 * time.Second}
	e.t.Cleanup(tr.CloseIdleConnections)
	log := slog.New(slog.NewTextHandler(e.t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if e.kafkaYAML != "" {
		tr = nil // built from the config's tls and sasl, as the CLI does
	}
	opts := job.Options{Logger: log, Transport: tr, Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second}
	for _, m := range mod {
		m(&opts)
	}
	j, err := job.New(cfg, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{job: j, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- j.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			r.done <- err
		}
	})
	return r
}

// wait waits for the job to exit on its own and returns its error.
func (r *running) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(timeout):
		t.Fatalf("job did not exit within %v", timeout)
		return nil
	}
}

// stop cancels the job like SIGTERM does and waits for a clean exit.
func (e *env) stop(r *running) {
	e.t.Helper()
	r.cancel()
	if err := r.wait(e.t, 30*time.Second); err != nil {
		e.t.Fatalf("job exited with an error after cancel: %v", err)
	}
}

// waitCommitted waits until the job committed at least frac of every
// partition's produced input, on every raw topic.
func (e *env) waitCommitted(r *running, frac float64, timeout time.Duration, only ...int32) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, c := true, map[int32]int64{}
		for topic := range e.prod.End {
			caught, tc, err := e.prod.Caught(e.ctx(10*time.Second), e.jobID, topic, partitions, frac, only...)
			if err != nil && !kerr.IsRetriable(err) {
				e.t.Fatal(err)
			}
			if !caught {
				ok, c = false, tc
			}
		}
		if ok {
			return
		}
		select {
		case err := <-r.done:
			r.done <- err // for the cleanup
			e.t.Fatalf("job exited early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job did not commit %.0f%% of the input within %v: committed %v of %v (stats %+v)", frac*100, timeout, c, e.prod.End[e.raw], r.job.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runToEnd starts the job on cfg, waits until it committed all the input
// produced so far, and stops it.
func (e *env) runToEnd(cfg *config.Config) *running {
	e.t.Helper()
	r := e.start(cfg)
	e.waitCommitted(r, 1, 60*time.Second)
	e.stop(r)
	return r
}

// readOutput reads the output and the DLQ read_committed with kgo.
func (e *env) readOutput() (out, dlq []*kgo.Record) {
	e.t.Helper()
	ctx := e.ctx(60 * time.Second)
	out, err := jobtest.ReadCommitted(ctx, e.brokers, e.out, partitions, e.clientOpts...)
	if err != nil {
		e.t.Fatal(err)
	}
	if dlq, err = jobtest.ReadCommitted(ctx, e.brokers, e.dlq, 1, e.clientOpts...); err != nil {
		e.t.Fatal(err)
	}
	return out, dlq
}

// verify reads output and DLQ read_committed with kgo and checks G1, G2,
// the DLQ and the accounting identity against the job counters st.
func (e *env) verify(w *jobtest.Workload, st job.Stats) {
	e.t.Helper()
	rep := e.verifyOutput(w)
	for _, p := range w.CheckAccounting(st, rep.Out, rep.DLQ) {
		e.t.Error("accounting: " + p)
	}
	e.t.Logf("in=%d out=%d dropped=%d dlq=%d escaped=%d lost=%d; job: %+v", rep.In, rep.Out, w.Dropped(), rep.DLQ, rep.Escaped, rep.Lost, st)
}

// crashAtFirstCommit returns an option for env.start whose job's stage dies
// at the first Committed failpoint: after that cycle's transaction
// committed and before its store commit, as under kill -9 there. Only a
// cycle that read input commits, so on stores a cleanly stopped run left
// it takes the first cycle of the new input; armed after waitCommitted
// instead, it could take the warm cycle, whose offsets are visible before
// its store commit (before the EndTxn answer on a real cluster). died
// closes when it fired (env.waitDied).
func crashAtFirstCommit() (opt func(*job.Options), died <-chan struct{}) {
	var calls atomic.Int32
	ch := make(chan struct{})
	return func(o *job.Options) {
		testhook.Set(o, testhook.Hooks{Failpoint: func(name string) {
			if name == testhook.Committed && calls.Add(1) == 1 {
				close(ch)
				runtime.Goexit() // the stage stops here: no store commit
			}
		}})
	}, ch
}

// waitDied waits until died closes (crashAtFirstCommit).
func (e *env) waitDied(died <-chan struct{}) {
	e.t.Helper()
	select {
	case <-died:
	case <-time.After(60 * time.Second):
		e.t.Fatal("the failpoint never fired")
	}
}

// verifyOutput reads output and DLQ read_committed with kgo and checks G1,
// G2 and the DLQ against w.
func (e *env) verifyOutput(w *jobtest.Workload) jobtest.Report {
	e.t.Helper()
	rep, err := w.Verify(e.ctx(60*time.Second), e.brokers, e.out, e.dlq, partitions, e.clientOpts...)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range rep.Problems {
		e.t.Error(p)
	}
	return rep
}

func sum(ss ...job.Stats) job.Stats {
	var t job.Stats
	for _, s := range ss {
		t.Counts.Add(s.Counts)
		t.Restored += s.Restored
	}
	return t
}

func TestEndToEnd(t *testing.T) {
	e := newEnv(t)
	w := e.workload(1, 14_000, 3_000)
	if len(w.Records) < 20_000 || w.Resends == 0 || w.Redeliveries == 0 || w.Poison == 0 {
		t.Fatalf("workload too small or lacks a duplicate kind: %d records, %d resends, %d redeliveries, %d poison",
			len(w.Records), w.Resends, w.Redeliveries, w.Poison)
	}
	r := e.start(e.config("0, 1, 2, 3"))
	// Produce while the job runs (ready: its start-up checks are done), so
	// that it sees many cycles and the replays meet keys committed long
	// before.
	for deadline := time.Now().Add(30 * time.Second); !r.job.Ready() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for chunk := range slices.Chunk(w.Records, 1_000) {
		e.produce(chunk)
		time.Sleep(20 * time.Millisecond)
	}
	e.waitCommitted(r, 1, 45*time.Second)
	e.stop(r)
	st := r.job.Stats()
	if st.Ready != 0 || r.job.Ready() {
		t.Errorf("stopped job still reports %d ready stages", st.Ready)
	}
	checkCollector(t, r.job, map[string]float64{
		"dedupstream_records_in_total":                           float64(st.In),
		"dedupstream_records_out_total":                          float64(st.Emitted),
		"dedupstream_dlq_records_total":                          float64(st.DeadLettered),
		`dedupstream_duplicates_dropped_total{reason="history"}`: float64(st.DroppedHistory),
	})
	if st.DroppedBatch == 0 || st.DroppedHistory == 0 || st.Cycles < 8 {
		t.Errorf("workload did not exercise both drop paths over many cycles: %+v", st)
	}
	e.verify(w, st)
}

// TestRestart stops the job mid-run, loses one partition's state
// directory, adds input that replays early keys, and starts again: the new
// run must restore the lost keys from the committed output.
func TestRestart(t *testing.T) {
	e := newEnv(t)
	w := e.workload(2, 8_000, 2_500)
	cut := len(w.Records) * 6 / 10
	cfg := e.config("0, 1, 2, 3")
	r1 := e.start(cfg)
	chunks := slices.Collect(slices.Chunk(w.Records[:cut], 500))
	for i, chunk := range chunks {
		e.produce(chunk)
		time.Sleep(10 * time.Millisecond)
		if i == len(chunks)/2 {
			// Mid-run, once partition 0 has output to restore from; input
			// keeps arriving while the job is down.
			e.waitCommitted(r1, 0.2, 30*time.Second, 0)
			e.stop(r1)
		}
	}
	if c, _ := e.prod.Committed(e.ctx(10*time.Second), e.jobID, e.raw, partitions); c[0] >= e.prod.End[e.raw][0] {
		t.Fatalf("first run was not stopped mid-run: partition 0 committed %d of %d", c[0], e.prod.End[e.raw][0])
	}
	if err := os.RemoveAll(filepath.Join(cfg.State.Dir, "partition-0")); err != nil {
		t.Fatal(err)
	}
	e.produce(w.Records[cut:])
	r2 := e.start(cfg)
	e.waitCommitted(r2, 1, 45*time.Second)
	e.stop(r2)
	if s := r2.job.Stats(); s.Restored == 0 {
		t.Errorf("second run restored nothing from the output after its state was removed: %+v", s)
	}
	e.verify(w, sum(r1.job.Stats(), r2.job.Stats()))
}

// TestFenced runs two instances that both own partition 1: the newer one
// fences the older, which must exit with a clear error, and the output
// stays clean.
func TestFenced(t *testing.T) {
	e := newEnv(t)
	w := e.workload(3, 3_000, 500)
	half := len(w.Records) / 2
	e.produce(w.Records[:half])
	old := e.start(e.config("0, 1"))
	e.waitCommitted(old, 0.2, 30*time.Second, 0, 1)
	// The second instance owns 1, 2, 3: partition 1 twice.
	cfgB := e.config("1, 2, 3")
	cfgB.State.Dir += "-b"
	young := e.start(cfgB)
	// The older instance learns it is fenced only when it writes again:
	// give it input once the younger one has taken partition 1 over.
	for young.job.Stats().Recovered < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	e.produce(w.Records[half:])
	err := old.wait(t, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "partition 1: fenced: another instance took over") {
		t.Fatalf("older instance: want a fenced error for partition 1 naming another instance, got %v", err)
	}
	checkCollector(t, old.job, map[string]float64{`dedupstream_producer_fenced_total{cause="taken_over"}`: 1})
	t.Logf("older instance exited with: %v", err)
	e.waitCommitted(young, 1, 30*time.Second, 1, 2, 3)
	e.stop(young)
	// Partition 0 stopped with the old instance; finish it on its own.
	rest := e.start(e.config("0"))
	e.waitCommitted(rest, 1, 30*time.Second)
	e.stop(rest)

	ctx := e.ctx(30 * time.Second)
	rep, err := w.Verify(ctx, e.brokers, e.out, e.dlq, partitions)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
}

func TestTopicChecks(t *testing.T) {
	e := newEnv(t)
	three := e.topic("three", 3)
	for _, tc := range []struct {
		name string
		mod  func(*config.Config)
		want string
	}{
		{"output partitions", func(c *config.Config) { c.Output.Topic = three }, fmt.Sprintf(`input.topics[0]: raw topic %q has 4 partitions, output topic %q has 3`, e.raw, three)},
		{"missing dlq", func(c *config.Config) { c.Output.DLQTopic = "nope" }, `output.dlq_topic: topic "nope" does not exist`},
		{"partition out of range", func(c *config.Config) { c.Assignment.Partitions = []int{7} }, "assignment.partitions[0]: partition 7 does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config("0")
			tc.mod(cfg)
			j, err := job.New(cfg, job.Options{RetryTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			err = j.Run(e.ctx(20 * time.Second))
			if !errors.Is(err, job.ErrTopics) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// TestBrokerFaults runs the job while the broker misbehaves: every 4th
// EndTxn is answered only after the client gave up (the commit may land
// after an ambiguous error), every 9th produce and every 15th fetch lose
// their connection. Aborts and recoveries must keep the output exact.
func TestBrokerFaults(t *testing.T) {
	kafkatest.SkipExternal(t, "drives kfake's request controls; chaos/ has the real-broker faults")
	e := newEnv(t)
	w := e.workload(6, 6_000, 1_500)
	var endTxn, produce, fetch, late atomic.Int64
	var stop atomic.Bool
	every := func(key kmsg.Key, n *atomic.Int64, each int64, fault func() (kmsg.Response, error, bool)) {
		e.cluster.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
			e.cluster.KeepControl()
			if stop.Load() || n.Add(1)%each != 0 {
				return nil, nil, false
			}
			return fault()
		})
	}
	every(kmsg.EndTxn, &endTxn, 4, func() (kmsg.Response, error, bool) {
		late.Add(1)
		e.cluster.SleepControl(func() { time.Sleep(600 * time.Millisecond) })
		return nil, nil, false // handled, but after the client's timeout
	})
	closeConn := func() (kmsg.Response, error, bool) { return nil, errors.New("injected: close connection"), true }
	every(kmsg.Produce, &produce, 9, closeConn)
	every(kmsg.Fetch, &fetch, 15, closeConn)

	r := e.start(e.config("0, 1, 2, 3"), func(o *job.Options) {
		o.RequestTimeout = 250 * time.Millisecond
		o.RetryTimeout = 2 * time.Second
	})
	e.feed(w, 20*time.Millisecond)
	e.waitCommitted(r, 1, 50*time.Second)
	stop.Store(true)
	e.stop(r)
	st := r.job.Stats()
	t.Logf("faults: %d late EndTxn answers, %d produce and %d fetch requests seen; %d recoveries", late.Load(), produce.Load(), fetch.Load(), st.Recoveries)
	if late.Load() == 0 || st.Recoveries <= partitions {
		t.Errorf("faults did not cause recoveries: late EndTxn %d, recoveries %d", late.Load(), st.Recoveries)
	}
	e.verify(w, st)
}

// TestMisrouted feeds records routed with kafka-go's FNV-1a Hash balancer
// to a job whose config says the producers use murmur2: every record whose
// two partitions differ must be counted.
func TestMisrouted(t *testing.T) {
	e := newEnv(t)
	cfg := e.config("0, 1, 2, 3")
	cfg.Dedup.Key = []string{"key"}
	var recs []*kgo.Record
	want := 0
	for i := range 2_000 {
		k := []byte(fmt.Sprintf("k-%d", i))
		p := partition.FNV1aPartition(k, partitions)
		if p != partition.Murmur2Partition(k, partitions) {
			want++
		}
		recs = append(recs, &kgo.Record{Topic: e.raw, Partition: int32(p), Key: k, Value: []byte("v")})
	}
	if want == 0 {
		t.Fatal("no record is misrouted; the test proves nothing")
	}
	e.produce(recs)
	r := e.start(cfg)
	e.waitCommitted(r, 1, 30*time.Second)
	e.stop(r)
	if st := r.job.Stats(); st.Misrouted != uint64(want) || st.Emitted != 2_000 {
		t.Errorf("misrouted = %d, emitted = %d; want %d misrouted of 2000 emitted", st.Misrouted, st.Emitted, want)
	}
}

// TestSeveralTopics feeds one job from two raw topics: the second carries
// a replay of the first's early records, which must all be dropped.
func TestSeveralTopics(t *testing.T) {
	e := newEnv(t)
	backlog := e.topic("orders-backlog", partitions)
	w := jobtest.New(jobtest.Spec{Topic: e.raw, ReplayTopic: backlog, Partitions: partitions, Keys: 5_000, Replay: 2_000, Seed: 7})
	r := e.start(e.config("0, 1, 2, 3", backlog))
	e.feed(w, 10*time.Millisecond)
	e.waitCommitted(r, 1, 30*time.Second)
	e.stop(r)
	e.verify(w, r.job.Stats())
}

// feed produces w's records in chunks of 500, pause apart, so that they
// span several commit cycles of the job.
func (e *env) feed(w *jobtest.Workload, pause time.Duration) {
	for chunk := range slices.Chunk(w.Records, 500) {
		e.produce(chunk)
		time.Sleep(pause)
	}
}

// gatherJob gathers the job's collector through a pedantic registry.
func gatherJob(t *testing.T, j *job.Job) []*dto.MetricFamily {
	t.Helper()
	families, err := jobtest.Gather(j)
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// checkCollector gathers the job's metrics and compares the named ones.
func checkCollector(t *testing.T, j *job.Job, want map[string]float64) {
	t.Helper()
	got := map[string]float64{}
	for _, f := range gatherJob(t, j) {
		for _, m := range f.GetMetric() {
			name := f.GetName() // summed over partitions
			for _, l := range m.GetLabel() {
				if l.GetName() != "partition" {
					name += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
				}
			}
			got[name] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("metric %s = %v, want %v", name, got[name], v)
		}
	}
}
