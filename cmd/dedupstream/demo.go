package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/progress"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/twmb/franz-go/pkg/kfake"
)

// demoConfig is the job the demo runs; brokers and state dir are filled in.
const demoConfig = `job: {id: demo}
kafka: {brokers: [%q]}
input: {topics: [orders-raw]}
output: {topic: orders, dlq_topic: orders-dlq}
assignment: {partitions: [%s]}
dedup:
  key: ["json:order_id"]
  expected_keys: %d
state: {dir: %q, memory: 128MiB}
commit: {interval: 100ms, max_records: 5000}
log: {level: warn}
`

func cmdDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "demo [--keys N] [--replay N] [--partitions N]\n\nStart an embedded broker, produce orders with every kind of duplicate (producer\nresends with new bytes, identical redeliveries, a replay of old records, poison\nrecords), run the job, read the output back read_committed with an independent\nclient and print a report. Exit 1 if a key is repeated or lost.", stdout, stderr)
	keys := fs.Int("keys", 70_000, "distinct business keys")
	replay := fs.Int("replay", 15_000, "early records replayed at the end")
	parts := fs.Int("partitions", 4, "partitions of the raw and output topics")
	level := logLevelFlag(fs, "warn")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 0 || *keys < 1 || *replay < 0 || *parts < 1 {
		fmt.Fprintln(stderr, "dedupstream demo: want --keys >= 1, --replay >= 0, --partitions >= 1 and no arguments")
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := newLogger(config.Log{Level: *level, Format: "auto"}, stderr)
	if err := demo(ctx, stdout, log, *keys, *replay, *parts); err != nil {
		fmt.Fprintf(stderr, "dedupstream demo: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func demo(ctx context.Context, w io.Writer, log *slog.Logger, keys, replay, parts int) error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(int32(parts), "orders-raw", "orders"), kfake.SeedTopics(1, "orders-dlq"))
	if err != nil {
		return fmt.Errorf("start embedded broker: %w", err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	fmt.Fprintf(w, "embedded broker on %s; topics orders-raw and orders (%d partitions), orders-dlq\n", brokers[0], parts)

	wl := jobtest.New(jobtest.Spec{Topic: "orders-raw", Partitions: parts, Keys: keys, Replay: replay, Seed: uint64(time.Now().UnixNano())})
	fmt.Fprintf(w, "workload: %d records, %d distinct orders, %d producer resends, %d redeliveries, %d replayed, %d poison\n",
		len(wl.Records), keys, wl.Resends, wl.Redeliveries, min(replay, keys), wl.Poison)
	dir, err := os.MkdirTemp("", "dedupstream-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	partList := ""
	for p := range parts {
		if p > 0 {
			partList += ", "
		}
		partList += fmt.Sprint(p)
	}
	cfgPath := filepath.Join(dir, "demo.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, demoConfig, brokers[0], partList, 2*keys/parts+1000, filepath.Join(dir, "state")), 0o644); err != nil {
		return err
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	j, err := job.New(cfg, job.Options{Logger: log})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- j.Run(runCtx) }()

	// Input arrives while the job runs, as in a real stream.
	prod, err := jobtest.NewProducer(brokers)
	if err != nil {
		return err
	}
	defer prod.Close()
	for chunk := range slices.Chunk(wl.Records, 2_000) {
		if err := prod.Produce(ctx, chunk); err != nil {
			return err
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prog := progress.New(w, "processed", int64(len(wl.Records)))
	for {
		ok, _, err := prod.Caught(ctx, cfg.Job.ID, "orders-raw", parts, 1)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		select {
		case err := <-done:
			return fmt.Errorf("job stopped early: %v", err)
		case <-ctx.Done():
			cancel()
			<-done
			return ctx.Err()
		case <-tick.C:
			prog.Set(int64(j.Stats().In))
		case <-time.After(20 * time.Millisecond):
		}
	}
	took := time.Since(start)
	prog.Set(int64(j.Stats().In))
	prog.Finish()
	cancel()
	if err := <-done; err != nil {
		return fmt.Errorf("job: %w", err)
	}

	readCtx, cancelRead := context.WithTimeout(ctx, time.Minute)
	defer cancelRead()
	rep, err := wl.Verify(readCtx, brokers, "orders", "orders-dlq", parts)
	if err != nil {
		return err
	}
	st := j.Stats()
	problems := append(rep.Problems, wl.CheckAccounting(st, rep.Out, rep.DLQ)...)
	tw := func(k string, v any) { fmt.Fprintf(w, "  %-28s %v\n", k, v) }
	fmt.Fprintln(w, "report (output read back read_committed by an independent kgo client):")
	tw("records in", len(wl.Records))
	tw("records out", rep.Out)
	tw("dropped, same commit cycle", st.DroppedBatch)
	tw("dropped, seen before", st.DroppedHistory)
	tw("dead-lettered", rep.DLQ)
	tw("in = out + dropped + dlq", st.In == st.Emitted+st.DroppedBatch+st.DroppedHistory+st.DeadLettered)
	tw("escaped duplicates", rep.Escaped)
	tw("lost records", rep.Lost)
	tw("transactions", st.Cycles)
	tw("records/s", fmt.Sprintf("%.0f", float64(len(wl.Records))/took.Seconds()))
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(w, "  FAIL:", p)
		}
		return fmt.Errorf("the guarantee failed: %d problems", len(problems))
	}
	fmt.Fprintln(w, "PASS: no business key repeated, none lost")
	return nil
}
