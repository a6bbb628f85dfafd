package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/trace"
	"strings"
	"time"

	"github.com/dedupstream/dedupstream/bench/workload"
	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// E2ECase is one end-to-end comparison: the stream is produced once to the
// raw topics, then Reps times the copy job and the dedup job each read all
// of it from the start into a topic of their own (alternating which goes
// first). Throughput is records in over the time from "every partition
// ready" to "every input offset committed".
type E2ECase struct {
	Spec    workload.Spec // Topics and Partitions shape the raw topics
	Records int
	Reps    int
	// Brokers are external brokers; empty starts an embedded kfake broker.
	Brokers []string
	// Replication of the topics the harness creates; -1 is the broker's
	// default.
	Replication int16
	Interval    time.Duration // commit interval of both jobs
	MaxRecords  int           // records per commit cycle of both jobs
	// FetchMaxBytes (per partition) and BatchMaxBytes (produce) of both
	// jobs; 0 is the job's config default.
	FetchMaxBytes, BatchMaxBytes int
	// FetchMinBytes is dedupstream's fetch.min_bytes (0: the job's
	// default, partition_max_bytes; 1: answer at once).
	FetchMinBytes int
	// MaxInFlight is the produce requests in flight per transaction of
	// both jobs (0: the job's default, 1: one at a time), NoFetchAhead
	// turns the job's fetch.ahead off (the copy job never fetches ahead).
	MaxInFlight  int
	NoFetchAhead bool
	Dir          string // parent of the state directories
	// TimedProfile, when not empty, is the prefix of a CPU profile of
	// each job run's timed span alone (ready to caught up):
	// TimedProfile-SYSTEM-REP.pprof. The profile is of the whole process,
	// so it holds the embedded broker's and the harness's work too.
	TimedProfile string
	// TimedTrace, when not empty, is the prefix of a Go execution trace
	// (runtime/trace) of each job run from ready to stopped:
	// TimedTrace-SYSTEM-REP.trace (go tool trace).
	TimedTrace string
}

// RunE2E runs an end-to-end case and returns one result per system and rep.
func RunE2E(ctx context.Context, c E2ECase, p *Progress) ([]Result, error) {
	g, err := workload.NewGenerator(c.Spec)
	if err != nil {
		return nil, err
	}
	spec := g.Spec()
	env, err := setupE2E(ctx, c, spec, 5*time.Millisecond, p)
	if err != nil {
		return nil, err
	}
	defer env.close()
	caseName, brokers, cl, raw, prefix := CaseE2EExternal, env.brokers, env.cl, env.raw, env.prefix
	if env.embedded {
		caseName = CaseE2EEmbedded
	}
	// Produce the stream once.
	ends, _, err := produceStream(ctx, cl, g, raw, c.Records, p, caseName)
	if err != nil {
		return nil, err
	}
	truth := g.Counts()
	p.Say("%s: input: %d records, %d distinct keys, %d duplicates (%.1f%%) over %d raw topics of %d partitions",
		caseName, truth.Records, truth.New, truth.Duplicates(), 100*float64(truth.Duplicates())/float64(truth.Records), len(raw), spec.Partitions)

	var results []Result
	for rep := range c.Reps {
		order := []string{SysCopy, SysDedup}
		if rep%2 == 1 {
			order = []string{SysDedup, SysCopy}
		}
		for _, sys := range order {
			name := fmt.Sprintf("%s-%s-%d", prefix, sys, rep)
			r := Result{Case: caseName, System: sys, Rep: rep, Workload: spec, KeysInWindow: spec.KeysPerWindow,
				Records: truth.Records, DupRatio: float64(truth.Duplicates()) / float64(truth.Records)}
			if err := createTopics(ctx, cl, []string{name, name + "-dlq"}, spec.Partitions, c.Replication); err != nil {
				return results, err
			}
			mem := startMemProbe()
			var took time.Duration
			var prof timedOut
			if c.TimedProfile != "" {
				prof.profile = fmt.Sprintf("%s-%s-%d.pprof", c.TimedProfile, sys, rep)
			}
			if c.TimedTrace != "" {
				prof.trace = fmt.Sprintf("%s-%s-%d.trace", c.TimedTrace, sys, rep)
			}
			if sys == SysCopy {
				took, err = runCopy(ctx, c, brokers, raw, name, cl, ends, p, prof)
			} else {
				took, err = runDedup(ctx, c, brokers, raw, name, cl, ends, p, &r, prof)
			}
			if err != nil {
				return results, fmt.Errorf("%s rep %d: %w", sys, rep, err)
			}
			r.RSSStartBytes, r.RSSPeakBytes = mem.peak()
			r.Seconds = took.Seconds()
			r.RecordsPerSec = float64(truth.Records) / took.Seconds()
			p.Say("%s rep %d %s: %s records in %.2fs = %s records/s; reading the output back read_committed", caseName, rep, sys, count(truth.Records), took.Seconds(), rate(truth.Records, took))
			if err := checkOutput(ctx, brokers, name, spec.Partitions, sys, truth, &r); err != nil {
				return results, err
			}
			if !env.embedded {
				dropTopics(ctx, cl, p, name, name+"-dlq")
			}
			if sys != SysCopy {
				r.Note = "RSS includes the in-process embedded broker"
				if caseName == CaseE2EExternal {
					r.Note = ""
				}
			}
			r.Valid = r.Correct.OK()
			p.Say("%s rep %d %s: %v", caseName, rep, sys, r.Correct)
			results = append(results, r)
		}
	}
	return results, nil
}

// e2eEnv is what an end-to-end case runs on: the brokers (embedded unless
// the case names some), a producing client and the raw topics, created.
type e2eEnv struct {
	brokers  []string
	embedded bool
	cl       *kgo.Client
	raw      []string
	prefix   string // of every topic name of the case
	close    func()
}

// setupE2E starts the embedded broker if c names no brokers, connects a
// client that produces with linger (manual partitioning) and creates the
// raw topics of spec.
func setupE2E(ctx context.Context, c E2ECase, spec workload.Spec, linger time.Duration, p *Progress) (*e2eEnv, error) {
	env := &e2eEnv{brokers: c.Brokers, close: func() {}}
	if len(env.brokers) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return nil, fmt.Errorf("start embedded broker: %w", err)
		}
		env.embedded, env.brokers, env.close = true, cluster.ListenAddrs(), cluster.Close
		p.Say("embedded broker on %s", env.brokers[0])
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(linger), kgo.MaxBufferedRecords(engineBatch*2))
	if err != nil {
		env.close()
		return nil, err
	}
	closeBroker := env.close
	env.cl, env.close = cl, func() {
		if !env.embedded {
			dropTopics(ctx, cl, p, env.raw...)
		}
		cl.Close()
		closeBroker()
	}
	env.prefix = fmt.Sprintf("dsbench-%d", time.Now().UnixNano()/1e6)
	env.raw = make([]string, spec.Topics)
	for i := range env.raw {
		env.raw[i] = fmt.Sprintf("%s-raw-%d", env.prefix, i)
	}
	if err := createTopics(ctx, cl, env.raw, spec.Partitions, c.Replication); err != nil {
		env.close()
		return nil, err
	}
	return env, nil
}

// checkOutput reads topic back read_committed with an independent client
// and sets r.Correct: the copy job must copy every record once (a count
// check), dedupstream must emit each key of the ground truth once.
func checkOutput(ctx context.Context, brokers []string, topic string, partitions int, sys string, truth workload.Counts, r *Result) error {
	chk := workload.NewChecker(truth.New)
	var out uint64
	if err := readBack(ctx, brokers, topic, partitions, func(key []byte) { out++; chk.EmitKey(key) }); err != nil {
		return err
	}
	if sys != SysCopy {
		r.Correct = chk.Result(truth)
		return nil
	}
	r.Correct = workload.Verdict{Expected: truth.Records, Emitted: out}
	if out < truth.Records {
		r.Correct.Lost = truth.Records - out
	} else {
		r.Correct.Escaped = out - truth.Records
	}
	r.Note = "correctness: output records = input records"
	return nil
}

// produceStream produces records of g's stream to the raw topics (partition
// as the generator says) and returns each raw partition's end offset and the
// bytes of keys and values produced.
func produceStream(ctx context.Context, cl *kgo.Client, g *workload.Generator, raw []string, records int, p *Progress, caseName string) (map[string][]int64, uint64, error) {
	var bytes uint64
	spec := g.Spec()
	ends := make(map[string][]int64, len(raw))
	for _, t := range raw {
		ends[t] = make([]int64, spec.Partitions)
	}
	krecs := make([]*kgo.Record, engineBatch)
	for i := range krecs {
		krecs[i] = &kgo.Record{}
	}
	start := time.Now()
	for done := 0; done < records; {
		in := g.Fill(min(engineBatch, records-done))
		batch := krecs[:len(in)]
		for i := range in {
			*batch[i] = kgo.Record{Topic: raw[in[i].Topic], Partition: int32(in[i].Partition), Key: in[i].Key, Value: in[i].Value, Timestamp: time.UnixMilli(in[i].TimestampMs)}
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			return nil, 0, fmt.Errorf("produce input: %w", err)
		}
		for _, r := range batch {
			bytes += uint64(len(r.Key) + len(r.Value))
			e := ends[r.Topic]
			e[r.Partition] = max(e[r.Partition], r.Offset+1)
		}
		done += len(in)
		p.Tick("%s: produced %s of %s input records (%s records/s)", caseName, count(uint64(done)), count(uint64(records)), rate(uint64(done), time.Since(start)))
	}
	return ends, bytes, nil
}

// createTopics creates topics with partitions partitions; records are
// never deleted by time (the stream's record time lies in the past).
func createTopics(ctx context.Context, cl *kgo.Client, names []string, partitions int, replication int16) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	for _, n := range names {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic = n
		t.NumPartitions = int32(partitions)
		if strings.HasSuffix(n, "-dlq") {
			t.NumPartitions = 1
		}
		t.ReplicationFactor = replication
		for k, v := range map[string]string{"retention.ms": "-1", "retention.bytes": "-1"} {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name, c.Value = k, kmsg.StringPtr(v)
			t.Configs = append(t.Configs, c)
		}
		req.Topics = append(req.Topics, t)
	}
	res, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for _, t := range res.Topics {
		if err := kerrOf(t.ErrorCode); err != nil {
			return fmt.Errorf("create topic %s: %w", t.Topic, err)
		}
	}
	// A real cluster answers before every broker knows the topics; a job
	// that asks another broker would find them missing.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, t := range req.Topics {
		if err := kafkatest.WaitTopics(wctx, cl, t.NumPartitions, t.Topic); err != nil {
			return err
		}
	}
	return nil
}

// dropTopics deletes topics a run created, once it is done with them, and
// the partitions topic (job.PartitionsTopic) of each dedupstream job named
// after one of them; a name that does not exist is skipped. Every
// partition left on a cluster is walked by each replica fetch of its
// brokers (with RF 3, about a tenth of the brokers' CPU in a profile of a
// latency run after a few dozen runs), so leftovers of earlier runs would
// slow the later ones. Failures are reported through p and otherwise
// ignored: the figures stand without the cleanup.
func dropTopics(ctx context.Context, cl *kgo.Client, p *Progress, names ...string) {
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 30_000
	for _, n := range names {
		for _, t := range []string{n, job.PartitionsTopic(n)} {
			dt := kmsg.NewDeleteTopicsRequestTopic()
			dt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, dt)
			req.TopicNames = append(req.TopicNames, t)
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 40*time.Second)
	defer cancel()
	res, err := req.RequestWith(ctx, cl)
	if err != nil {
		p.Say("delete the run's topics: %v", err)
		return
	}
	for _, t := range res.Topics {
		if t.ErrorCode != 0 && t.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			p.Say("delete topic %s: %v", name, kerr.ErrorForCode(t.ErrorCode))
		}
	}
}

func kerrOf(code int16) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("kafka error code %d", code)
}

// waitCommitted polls the group's committed offsets until they reach ends
// on every raw partition, or done delivers the job's early exit. half, if
// not nil, is called once with the records committed when a poll first
// finds at least half of them committed.
func waitCommitted(ctx context.Context, cl *kgo.Client, group string, ends map[string][]int64, done <-chan error, p *Progress, what string, started time.Time, half func(committed int64)) error {
	var total int64
	for _, e := range ends {
		for _, o := range e {
			total += o
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = group
		for t, e := range ends {
			rt := kmsg.NewOffsetFetchRequestTopic()
			rt.Topic = t
			for i := range e {
				rt.Partitions = append(rt.Partitions, int32(i))
			}
			req.Topics = append(req.Topics, rt)
		}
		res, err := req.RequestWith(ctx, cl)
		if err != nil && !kerr.IsRetriable(err) {
			return fmt.Errorf("offset fetch: %w", err)
		}
		if err != nil {
			res = kmsg.NewPtrOffsetFetchResponse()
		}
		var sum int64
		caught := err == nil // a coordinator still loading: ask again
		got := map[string]map[int32]int64{}
		for _, t := range res.Topics {
			got[t.Topic] = map[int32]int64{}
			for _, tp := range t.Partitions {
				if tp.ErrorCode == 0 && tp.Offset >= 0 {
					got[t.Topic][tp.Partition] = tp.Offset
				}
			}
		}
		for t, e := range ends {
			for i, end := range e {
				off := got[t][int32(i)]
				sum += min(off, end)
				if off < end {
					caught = false
				}
			}
		}
		if caught {
			return nil
		}
		if half != nil && 2*sum >= total {
			half(sum)
			half = nil
		}
		p.Tick("%s: %s of %s input records committed, %s records/s", what, count(uint64(sum)), count(uint64(total)), rate(uint64(sum), time.Since(started)))
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("stopped before it caught up")
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// runCopy runs the copy job over the raw topics into out.
// prof names where the CPU profile and the trace of the timed span go.
func runCopy(ctx context.Context, c E2ECase, brokers, raw []string, out string, cl *kgo.Client, ends map[string][]int64, p *Progress, prof timedOut) (time.Duration, error) {
	cj := newCopyJob(c, brokers, raw, out)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	readyC := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() { done <- cj.Run(runCtx, func() { readyC <- time.Now() }) }()
	var start time.Time
	select {
	case start = <-readyC:
	case err := <-done:
		return 0, fmt.Errorf("copy job stopped before it was ready: %v", err)
	}
	stopProfile := prof.start(p)
	use := startSpanUsage()
	if err := waitCommitted(ctx, cl, out, ends, done, p, "copy-job "+out, start, use.half); err != nil {
		stopProfile()
		return 0, err
	}
	took := time.Since(start)
	use.report(p, "copy-job "+out, ends)
	stopProfile()
	cancel()
	if err := <-done; err != nil {
		return 0, err
	}
	return took, nil
}

// newCopyJob is the copy job of case c over the raw topics into out.
func newCopyJob(c E2ECase, brokers, raw []string, out string) *CopyJob {
	parts := make([]int, c.Spec.Partitions)
	for i := range parts {
		parts[i] = i
	}
	return &CopyJob{
		Client: &kafka.Client{Addr: kafka.TCP(brokers...), Transport: &kafka.Transport{ClientID: "dsbench-copy", DialTimeout: 10 * time.Second}},
		Topics: raw, Output: out, Group: out, Partitions: parts,
		Interval: c.Interval, MaxRecords: c.MaxRecords,
		FetchMaxBytes: c.FetchMaxBytes, BatchMaxBytes: c.BatchMaxBytes,
		MaxInFlight: cmp.Or(c.MaxInFlight, config.DefaultProduceMaxInFlight),
	}
}

// jobConfig is the dedup job the harness runs; everything not named is the
// default of configs/reference.yaml.
const jobConfig = `job: {id: %q}
kafka: {brokers: [%s]}
input: {topics: [%s]}
output: {topic: %q, dlq_topic: %q}
assignment: {partitions: [%s]}
dedup: {%sexpected_keys: %d}
state: {dir: %q}
commit: {interval: %s, max_records: %d}
fetch: {partition_max_bytes: %d, min_bytes: %d, ahead: %t}
produce: {batch_max_bytes: %d, max_in_flight: %d}
metrics: {listen: "off"}
log: {level: warn}
`

func quoteList[T any](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%q", fmt.Sprint(x))
	}
	return strings.Join(s, ", ")
}

// runningJob is the real job started by startDedup: done delivers Run's
// return, stop cancels it and removes its state directory.
type runningJob struct {
	j      *job.Job
	dir    string
	done   chan error
	cancel context.CancelFunc
}

// stop cancels the job, waits for Run to return and removes the state
// directory; it returns Run's error.
func (rj *runningJob) stop() error {
	rj.cancel()
	err := <-rj.done
	os.RemoveAll(rj.dir)
	return err
}

// startDedup starts the real job (job.New, Run) over the raw topics into
// out and returns once every stage is ready (recovered, reading input).
func startDedup(ctx context.Context, c E2ECase, brokers, raw []string, out string) (*runningJob, error) {
	dir, err := os.MkdirTemp(c.Dir, "dsbench-job-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*runningJob, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	parts := make([]string, c.Spec.Partitions)
	for i := range parts {
		parts[i] = fmt.Sprint(i)
	}
	// The Bloom front is sized for a full window's keys (its generations
	// each take a window/generations share of them), even when the stream
	// is shorter than the window.
	perPartition := c.Spec.KeysPerWindow/c.Spec.Partitions*11/10 + 1000
	// A workload without a window leaves the job's default window (an
	// explicit 0s is refused).
	window := ""
	if c.Spec.Window > 0 {
		window = fmt.Sprintf("window: %s, ", c.Spec.Window)
	}
	text := fmt.Sprintf(jobConfig, out, quoteList(brokers), quoteList(raw), out, out+"-dlq", strings.Join(parts, ", "),
		window, perPartition, filepath.Join(dir, "state"), c.Interval, c.MaxRecords,
		cmp.Or(c.FetchMaxBytes, int(config.DefaultFetchPartitionMaxBytes)), c.fetchMinBytes(), !c.NoFetchAhead,
		cmp.Or(c.BatchMaxBytes, int(config.DefaultProduceBatchMaxBytes)), cmp.Or(c.MaxInFlight, config.DefaultProduceMaxInFlight))
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fail(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return fail(err)
	}
	j, err := job.New(cfg, job.Options{})
	if err != nil {
		return fail(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	rj := &runningJob{j: j, dir: dir, done: make(chan error, 1), cancel: cancel}
	go func() { rj.done <- j.Run(runCtx) }()
	// Ready: every stage recovered and reads input.
	for j.Stats().Ready < c.Spec.Partitions {
		select {
		case err := <-rj.done:
			cancel()
			return fail(fmt.Errorf("job stopped before it was ready: %v", err))
		case <-ctx.Done():
			rj.stop()
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return rj, nil
}

// runDedup runs the real job (job.New, Run) over the raw topics into out;
// prof as runCopy's.
func runDedup(ctx context.Context, c E2ECase, brokers, raw []string, out string, cl *kgo.Client, ends map[string][]int64, p *Progress, r *Result, prof timedOut) (time.Duration, error) {
	rj, err := startDedup(ctx, c, brokers, raw, out)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	stopProfile := prof.start(p)
	use := startSpanUsage()
	if err := waitCommitted(ctx, cl, out, ends, rj.done, p, "dedupstream "+out, start, use.half); err != nil {
		stopProfile()
		rj.stop()
		return 0, err
	}
	took := time.Since(start)
	use.report(p, "dedupstream "+out, ends)
	stopProfile()
	disk := dirBytes(filepath.Join(rj.dir, "state"))
	if err := rj.stop(); err != nil {
		return 0, err
	}
	st := rj.j.Stats()
	if st.In > 0 {
		r.StoreReadsPerRecord = float64(st.StoreReads) / float64(st.In)
	}
	if n := st.FalsePositives + st.BloomNegative; n > 0 {
		r.BloomFPRate = float64(st.FalsePositives) / float64(n)
	}
	r.DiskBytesPerKey = float64(disk) / float64(c.Spec.KeysPerWindow)
	if st.DeadLettered > 0 {
		return took, fmt.Errorf("job dead-lettered %d records of a stream without poison records", st.DeadLettered)
	}
	return took, nil
}

// readBack reads topic read_committed with an independent client (kgo) up
// to a sentinel it appends to every partition first, and hands each key to
// fn. Call it when nothing writes to topic any more.
func readBack(ctx context.Context, brokers []string, topic string, partitions int, fn func(key []byte)) error {
	const sentinel = "dsbench.sentinel"
	w, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer w.Close()
	var sents []*kgo.Record
	for p := range int32(partitions) {
		sents = append(sents, &kgo.Record{Topic: topic, Partition: p, Key: []byte(sentinel)})
	}
	if err := w.ProduceSync(ctx, sents...).FirstErr(); err != nil {
		return fmt.Errorf("produce sentinels to %s: %w", topic, err)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer rd.Close()
	readCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	seen := map[int32]bool{}
	for len(seen) < partitions {
		fs := rd.PollFetches(readCtx)
		if err := readCtx.Err(); err != nil {
			return fmt.Errorf("read %s back: sentinels of %d of %d partitions: %w", topic, len(seen), partitions, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == sentinel {
				seen[r.Partition] = true
				return
			}
			fn(r.Key)
		})
	}
	return nil
}

// timedOut names the outputs of a job run's timed span: a CPU profile and
// a Go execution trace (empty: none).
type timedOut struct{ profile, trace string }

// start starts them and returns what stops them.
func (o timedOut) start(p *Progress) (stop func()) {
	stopProfile := startCPUProfile(o.profile, p)
	if o.trace == "" {
		return stopProfile
	}
	f, err := os.Create(o.trace)
	if err == nil {
		if err = trace.Start(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		p.Say("trace: %v", err)
		return stopProfile
	}
	return func() {
		trace.Stop()
		if err := f.Close(); err != nil {
			p.Say("trace: %v", err)
		}
		stopProfile()
	}
}

// fetchMinBytes is dedupstream's fetch.min_bytes for the case.
func (c *E2ECase) fetchMinBytes() int {
	return cmp.Or(c.FetchMinBytes, c.FetchMaxBytes, int(config.DefaultFetchPartitionMaxBytes))
}
