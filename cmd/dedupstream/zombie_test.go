package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
)

// TestGroupZombie runs two instances in assignment mode group. Instance A
// freezes itself (SIGSTOP) in the middle of a transaction, after its
// records are produced and before EndTxn; its heartbeats stop, the group
// expires it and B takes every partition over, fencing A's producers. Then
// A resumes (SIGCONT) and tries to commit: it must be fenced, rejoin the
// group and share the work again, and the output must hold every key once.
func TestGroupZombie(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess zombie test")
	}
	const parts = 4
	brokers, raw, out, dlq := jobTopics(t, parts)
	group := kafkatest.TopicName("zombie")
	dir := t.TempDir()
	writeCfg := func(name string) string {
		path := filepath.Join(dir, name+".yaml")
		cfg := fmt.Sprintf(`job: {id: %s}
kafka: {brokers: [%q], transaction_timeout: 30s}
input: {topics: [%s]}
output: {topic: %s, dlq_topic: %s}
assignment: {mode: group, session_timeout: 6s, heartbeat_interval: 500ms, rebalance_timeout: 20s}
dedup: {key: ["json:order_id"], expected_keys: 50000}
state: {dir: %s, cache_size: 8MiB, memtable_size: 1MiB}
commit: {interval: 30ms, max_records: 300}
log: {level: info, format: text}
metrics: {listen: "127.0.0.1:0"}
`, group, brokers[0], raw, out, dlq, filepath.Join(dir, "state-"+name))
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	w := jobtest.New(jobtest.Spec{Topic: raw, Partitions: parts, Keys: 6_000, Replay: 1_500, Seed: 12})
	prod, err := jobtest.NewProducer(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// Input arrives steadily through the whole test, so that every
	// instance is always in the middle of a cycle.
	chunks := slices.Collect(slices.Chunk(w.Records, 60))
	fed := make(chan error, 1)
	go func() {
		for _, c := range chunks {
			if err := prod.Produce(ctx, c); err != nil {
				fed <- err
				return
			}
			time.Sleep(80 * time.Millisecond)
		}
		fed <- nil
	}()

	a := startChild(t, writeCfg("a"), job.FailpointProduced+":15:stop")
	a.waitOutput(t, "failpoint produced: stopping myself", 30*time.Second)
	waitStopped(t, a)
	b := startChild(t, writeCfg("b"), "")
	// A misses its heartbeats: after the session timeout B owns all four
	// partitions, and its recovery fences A's producers.
	b.waitOutput(t, `partitions="[0 1 2 3]"`, 30*time.Second)
	for p := range parts {
		b.waitOutput(t, fmt.Sprintf("msg=recovered stage=%d", p), 20*time.Second)
	}
	a.cmd.Process.Signal(syscall.SIGCONT)
	a.waitOutput(t, "fenced", 20*time.Second)
	if err := <-fed; err != nil {
		t.Fatal(err)
	}
	waitCaught(ctx, t, prod, group, raw, parts, b)
	for _, ch := range []*child{a, b} {
		ch.cmd.Process.Signal(syscall.SIGTERM)
	}
	for name, ch := range map[string]*child{"a": a, "b": b} {
		select {
		case err := <-ch.done:
			ch.done <- err
			if err != nil {
				t.Errorf("instance %s: %v after SIGTERM, want exit 0:\n%s", name, err, ch.out.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("instance %s did not exit within 30s of SIGTERM", name)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("instance a:\n%s", a.out.String())
	}
	rep, err := w.Verify(ctx, brokers, out, dlq, parts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
	t.Logf("in=%d out=%d dlq=%d escaped=%d lost=%d", rep.In, rep.Out, rep.DLQ, rep.Escaped, rep.Lost)
}

// waitStopped waits until the child is in the stopped state.
func waitStopped(t *testing.T, c *child) {
	t.Helper()
	stat := fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		// "pid (comm) S ...": the state follows the command name.
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "T" {
			return
		}
	}
	t.Fatalf("child %d did not stop:\n%s", c.cmd.Process.Pid, c.out.String())
}
