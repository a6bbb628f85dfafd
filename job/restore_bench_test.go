package job

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/dedupstream/dedupstream/sink"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkRestore measures how fast a partition's state moves to a new
// owner through the committed output, against the alternatives, on one
// output partition of RESTORE_KEYS distinct keys (default 1M) on the
// embedded broker:
//
//   - read: only reading the output partition read_committed (the floor
//     of any restore that reads the output);
//   - restore: the recovery protocol into an empty store (read, insert
//     the keys, commit per batch), what a new owner does;
//   - reprocess: rebuilding the state by deciding the same records as
//     input with a fresh stage (read, Bloom front, lookups, commit every
//     10k), what rebuilding from the raw input costs at best.
//
// Each reports keys/s, seconds and process CPU per key; restore also the
// seconds of its tail, after the read (s-tail), and the runs the store
// holds when it ends (runs). Run: make bench-go BENCH=Restore PKGS=./job
// BENCHTIME=1x (RESTORE_KEYS=10000000 for the 10M figure). With
// RESTORE_CPUPROFILE=file, each restore writes a CPU profile of itself
// alone (the fill, the reads and the reprocessing left out): the first to
// file, the next to file.2, file.3, ... (go tool pprof merges them).
func BenchmarkRestore(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("RESTORE_KEYS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	c := kafkatest.NewCluster(b, kfake.SeedTopics(1, "raw", "out", "out-dlq"))
	brokers := c.ListenAddrs()
	fillOutput(b, brokers, "out", n)

	dir := b.TempDir()
	cfgPath := filepath.Join(dir, "job.yaml")
	yaml := fmt.Sprintf(`job: {id: restore}
kafka: {brokers: [%q]}
input: {topics: [raw]}
output: {topic: out, dlq_topic: out-dlq}
assignment: {partitions: [0]}
dedup: {key: ["json:order_id"], expected_keys: %d}
state: {dir: %s}
`, brokers[0], n, filepath.Join(dir, "state"))
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	j, err := New(cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	// The runner's stores take their cache and memtables from the run's
	// memory budget, as in Run.
	if err := j.openMemory(); err != nil {
		b.Fatal(err)
	}
	defer j.closeMemory()
	j.planMemory(1)
	lay := layout{partitions: 1, dlqPartitions: 1}
	ctx := context.Background()
	// report takes the wall time and the process CPU time (broker
	// included: it serves the reads in this process) since start.
	report := func(b *testing.B, keys int, start time.Time, cpu time.Duration) {
		took, used := time.Since(start), cpuTime()-cpu
		if keys != n {
			b.Fatalf("handled %d keys, want %d", keys, n)
		}
		b.ReportMetric(float64(keys)/took.Seconds(), "keys/s")
		b.ReportMetric(took.Seconds(), "s/restore")
		b.ReportMetric(float64(used.Nanoseconds())/1e3/float64(keys), "cpu-us/key")
	}

	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			f, err := fetch.New(j.client, "out", 0, fetch.Options{})
			if err != nil {
				b.Fatal(err)
			}
			start, cpu, keys := time.Now(), cpuTime(), 0
			err = f.ReadRange(ctx, 0, fetch.ToLastStable, func(bt *fetch.Batch) error {
				keys += len(bt.Records)
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			report(b, keys, start, cpu)
		}
	})
	profPath, profiles := os.Getenv("RESTORE_CPUPROFILE"), 0
	b.Run("restore", func(b *testing.B) {
		for b.Loop() {
			os.RemoveAll(cfg.State.Dir)
			r := newRunner(j, 0, lay, sink.Group{ID: cfg.Job.ID})
			if err := r.open(); err != nil {
				b.Fatal(err)
			}
			stop := func() {}
			if profPath != "" {
				stop = startProfile(b, profPath, profiles)
				profiles++
			}
			before, start, cpu := j.Stats().Restored, time.Now(), cpuTime()
			err := r.recover(ctx)
			stop()
			if err != nil {
				b.Fatal(err)
			}
			report(b, int(j.Stats().Restored-before), start, cpu)
			// The part after the read: writing the last loaded keys as runs.
			b.ReportMetric(r.restoreTail.Seconds(), "s-tail/restore")
			// The runs a lookup may probe right after the restore (the
			// merges of loaded runs follow on the store's merger).
			runs := 0
			for _, g := range r.stage.Stats().Store {
				runs += g.Runs
			}
			b.ReportMetric(float64(runs), "runs/restore")
			r.stage.Close()
		}
	})
	b.Run("reprocess", func(b *testing.B) {
		for b.Loop() {
			os.RemoveAll(cfg.State.Dir)
			stage, err := pipeline.Open(j.stateDir(0), j.pc, pipeline.Options{})
			if err != nil {
				b.Fatal(err)
			}
			f, err := fetch.New(j.client, "out", 0, fetch.Options{})
			if err != nil {
				b.Fatal(err)
			}
			r := &runner{}
			var (
				decs  []pipeline.Decision
				total pipeline.Counts
				since int
			)
			start, cpu := time.Now(), cpuTime()
			err = f.ReadRange(ctx, 0, fetch.ToLastStable, func(bt *fetch.Batch) error {
				var c pipeline.Counts
				decs, c, err = stage.Process(convert(r.recs, bt), decs[:0])
				total.Add(c)
				if since += len(bt.Records); since >= 10_000 {
					since = 0
					return stage.Commit(nil)
				}
				return err
			})
			if err == nil {
				err = stage.Commit(nil)
			}
			if err != nil {
				b.Fatal(err)
			}
			report(b, int(total.Emitted), start, cpu)
			stage.Close()
		}
	})
}

// startProfile starts a CPU profile into path (the nth: path.n+1 after
// the first) and returns what stops it.
func startProfile(b *testing.B, path string, n int) (stop func()) {
	if n > 0 {
		path += "." + strconv.Itoa(n+1)
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// fillOutput writes n distinct orders to partition 0 of topic.
func fillOutput(b *testing.B, brokers []string, topic string, n int) {
	b.Helper()
	cl := kafkatest.NewClient(b, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	now := time.Now()
	errs := make(chan error, 1)
	for i := range n {
		id := "o-" + strconv.Itoa(i)
		rec := &kgo.Record{Topic: topic, Key: []byte(id), Timestamp: now,
			Value: fmt.Appendf(nil, `{"order_id":%q,"msg_id":"m-%d","amount":%d}`, id, i, i)}
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}
