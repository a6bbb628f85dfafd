package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job/jobtest"
)

// TestScaleOut runs "dedupstream run" in assignment mode group while the
// number of instances goes 1, 2, 3, 2, 1 and round again, during a run of
// over 200k records: every step is a rebalance that moves partitions and
// their state. One instance is killed with SIGKILL instead of stopped, so
// the group only notices at its session timeout. The output must hold every
// key once, checked with an independent reader.
func TestScaleOut(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess scale-out test")
	}
	const parts = 6
	brokers, raw, out, dlq := jobTopics(t, parts)
	group := kafkatest.TopicName("scale")
	dir := t.TempDir()
	cfgPath := func(slot int) string {
		path := filepath.Join(dir, fmt.Sprintf("job-%d.yaml", slot))
		cfg := fmt.Sprintf(`job: {id: %s}
kafka: {brokers: [%q], transaction_timeout: 30s}
input: {topics: [%s]}
output: {topic: %s, dlq_topic: %s}
assignment: {mode: group, session_timeout: 6s, heartbeat_interval: 500ms, rebalance_timeout: 20s}
dedup: {key: ["json:order_id"], expected_keys: 200000}
state: {dir: %s, cache_size: 8MiB, memtable_size: 4MiB}
commit: {interval: 50ms, max_records: 2000}
log: {level: info, format: text}
metrics: {listen: "127.0.0.1:0"}
`, group, brokers[0], raw, out, dlq, filepath.Join(dir, fmt.Sprintf("state-%d", slot)))
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	w := jobtest.New(jobtest.Spec{Topic: raw, Partitions: parts, Keys: 140_000, Replay: 20_000, Seed: 31})
	if len(w.Records) < 200_000 {
		t.Fatalf("workload has %d records, want at least 200k", len(w.Records))
	}
	prod, err := jobtest.NewProducer(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Input arrives through the whole schedule, about 40 s of it.
	fed := make(chan error, 1)
	go func() {
		for c := range slices.Chunk(w.Records, 500) {
			if err := prod.Produce(ctx, c); err != nil {
				fed <- err
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		fed <- nil
	}()

	schedule := []int{1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2, 1}
	const killAt = 7 // the step 3 -> 2 of the second round kills instead
	var (
		running []*child
		all     []*child
	)
	for step, want := range schedule {
		for len(running) < want {
			ch := startChild(t, cfgPath(len(running)), "")
			running, all = append(running, ch), append(all, ch)
		}
		for len(running) > want {
			ch := running[len(running)-1]
			running = running[:len(running)-1]
			if step == killAt {
				ch.cmd.Process.Signal(syscall.SIGKILL)
				<-ch.done
				ch.done <- nil
				t.Logf("step %d: killed an instance with SIGKILL", step)
				continue
			}
			ch.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-ch.done:
				ch.done <- err
				if err != nil {
					t.Fatalf("step %d: instance exited with %v after SIGTERM, want 0:\n%s", step, err, ch.out.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("step %d: instance did not exit within 30s of SIGTERM", step)
			}
		}
		time.Sleep(3 * time.Second)
	}
	if err := <-fed; err != nil {
		t.Fatal(err)
	}
	last := running[0]
	waitCaught(ctx, t, prod, group, raw, parts, last)
	last.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-last.done; err != nil {
		t.Fatalf("last instance: %v after SIGTERM:\n%s", err, last.out.String())
	}
	last.done <- nil

	// Rebalances: the group's generation grows by one per rebalance.
	gen := 0
	re := regexp.MustCompile(`joined a consumer group generation.* generation=(\d+)`)
	for _, ch := range all {
		for _, m := range re.FindAllStringSubmatch(ch.out.String(), -1) {
			n, _ := strconv.Atoi(m[1])
			gen = max(gen, n)
		}
	}
	if gen < 10 {
		t.Errorf("the group reached generation %d, want at least 10 rebalances", gen)
	}
	rep, err := w.Verify(ctx, brokers, out, dlq, parts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
	t.Logf("%d instances started, generation %d; in=%d out=%d dlq=%d escaped=%d lost=%d",
		len(all), gen, rep.In, rep.Out, rep.DLQ, rep.Escaped, rep.Lost)
}
