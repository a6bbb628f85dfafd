package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/twmb/franz-go/pkg/kfake"
)

// child is "dedupstream run" in a subprocess: this test binary re-executed
// (see TestMain).
type child struct {
	cmd  *exec.Cmd
	out  lockedBuffer
	done chan error
}

// lockedBuffer collects a child's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitOutput waits until the child printed s.
func (c *child) waitOutput(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(c.out.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("child did not print %q within %v:\n%s", s, timeout, c.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startChild(t *testing.T, cfgPath, failpoint string) *child {
	t.Helper()
	c := &child{done: make(chan error, 1)}
	c.cmd = exec.Command(os.Args[0], "run", "--config", cfgPath)
	c.cmd.Env = append(os.Environ(), envChild+"=1", envFailpoint+"="+failpoint)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.done
		c.done <- nil
	})
	return c
}

// TestKillLoop kills "dedupstream run" with SIGKILL twelve times, at random
// moments and at failpoints (records produced but EndTxn not sent; the
// transaction committed but the store not; in the middle of a restore from
// the output), with input arriving between runs; then a last run drains
// everything and exits 0 on SIGTERM. The output must hold every key once.
func TestKillLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash loop")
	}
	const (
		raw, out, dlq = "raw", "out", "out-dlq"
		parts         = 4
		group         = "killloop"
	)
	c := kafkatest.NewCluster(t, kfake.SeedTopics(parts, raw, out), kfake.SeedTopics(1, dlq))
	brokers := c.ListenAddrs()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "job.yaml")
	cfg := fmt.Sprintf(`job: {id: %s}
kafka: {brokers: [%q], transaction_timeout: 20s}
input: {topics: [%s]}
output: {topic: %s, dlq_topic: %s}
assignment: {partitions: [0, 1, 2, 3]}
dedup: {key: ["json:order_id"], expected_keys: 50000}
state: {dir: %s, cache_size: 8MiB, memtable_size: 1MiB}
commit: {interval: 30ms, max_records: 500}
log: {level: warn, format: text}
metrics: {listen: "127.0.0.1:0"}
`, group, brokers[0], raw, out, dlq, filepath.Join(dir, "state"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	w := jobtest.New(jobtest.Spec{Topic: raw, Partitions: parts, Keys: 6_000, Replay: 1_500, Seed: 4})
	prod, err := jobtest.NewProducer(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	rng := rand.New(rand.NewPCG(5, 5))
	const kills = 12
	chunk := (len(w.Records) + kills) / (kills + 1)
	produced := 0
	feed := func() {
		n := min(produced+chunk, len(w.Records))
		if err := prod.Produce(ctx, w.Records[produced:n]); err != nil {
			t.Fatal(err)
		}
		produced = n
	}
	var hit [4]int
	for i := range kills {
		feed()
		fp := ""
		switch i % 4 {
		case 1:
			fp = fmt.Sprintf("%s:%d", job.FailpointProduced, 1+rng.IntN(3))
		case 2:
			fp = fmt.Sprintf("%s:%d", job.FailpointCommitted, 1+rng.IntN(3))
		case 3:
			// The previous run died between EndTxn and the store commit,
			// so this one starts with a store behind the output.
			fp = job.FailpointRestored + ":1"
		}
		ch := startChild(t, cfgPath, fp)
		var wait time.Duration
		if fp == "" {
			wait = time.Duration(150+rng.IntN(600)) * time.Millisecond
		} else {
			wait = 5 * time.Second // until the failpoint kills it
		}
		select {
		case err := <-ch.done:
			ch.done <- err
			if fp == "" {
				t.Fatalf("run %d exited on its own: %v\n%s", i, err, ch.out.String())
			}
			if ws, ok := ch.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("run %d with failpoint %s exited with %v, not by its failpoint:\n%s", i, fp, err, ch.out.String())
			}
			hit[i%4]++
		case <-time.After(wait):
			ch.cmd.Process.Signal(syscall.SIGKILL)
			<-ch.done
			ch.done <- nil
			if fp == "" {
				hit[0]++
			} else {
				t.Logf("run %d: failpoint %s not reached within %v; killed anyway", i, fp, wait)
			}
		}
	}
	t.Logf("kills: %d at random moments, %d after produce, %d after EndTxn, %d mid-restore", hit[0], hit[1], hit[2], hit[3])
	if hit[1] == 0 || hit[2] == 0 || hit[3] == 0 {
		t.Errorf("some failpoints were never hit: %v", hit)
	}
	for produced < len(w.Records) {
		feed()
	}

	// The last run drains everything and stops cleanly on SIGTERM.
	last := startChild(t, cfgPath, "")
	waitCaught(ctx, t, prod, group, raw, parts, last)
	last.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-last.done:
		last.done <- err
		if err != nil {
			t.Fatalf("last run: exit %v after SIGTERM, want 0:\n%s", err, last.out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("last run did not exit within 20s of SIGTERM")
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

// TestOverlappingInstances runs two "dedupstream run" processes whose
// static assignments share partition 1: the older one must be fenced and
// exit 1 with a message saying so, and the output must stay clean.
func TestOverlappingInstances(t *testing.T) {
	const (
		raw, out, dlq = "raw", "out", "out-dlq"
		parts         = 4
		group         = "overlap"
	)
	c := kafkatest.NewCluster(t, kfake.SeedTopics(parts, raw, out), kfake.SeedTopics(1, dlq))
	brokers := c.ListenAddrs()
	dir := t.TempDir()
	writeCfg := func(name, partitions, level string) string {
		path := filepath.Join(dir, name+".yaml")
		cfg := fmt.Sprintf(`job: {id: %s}
kafka: {brokers: [%q]}
input: {topics: [%s]}
output: {topic: %s, dlq_topic: %s}
assignment: {partitions: [%s]}
dedup: {key: ["json:order_id"], expected_keys: 50000}
state: {dir: %s, cache_size: 8MiB, memtable_size: 1MiB}
commit: {interval: 30ms}
log: {level: %s, format: text}
metrics: {listen: "127.0.0.1:0"}
`, group, brokers[0], raw, out, dlq, partitions, filepath.Join(dir, "state-"+name), level)
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	w := jobtest.New(jobtest.Spec{Topic: raw, Partitions: parts, Keys: 3_000, Replay: 500, Seed: 8})
	prod, err := jobtest.NewProducer(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	half := len(w.Records) / 2
	if err := prod.Produce(ctx, w.Records[:half]); err != nil {
		t.Fatal(err)
	}
	older := startChild(t, writeCfg("a", "0, 1", "warn"), "")
	waitCaught(ctx, t, prod, group, raw, parts, older, 0, 1)
	newer := startChild(t, writeCfg("b", "1, 2, 3", "info"), "")
	// The older instance learns it is fenced only when it writes again:
	// give it input once the newer one has taken partition 1 over.
	newer.waitOutput(t, "msg=recovered stage=1", 20*time.Second)
	if err := prod.Produce(ctx, w.Records[half:]); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-older.done:
		older.done <- err
		if code := older.cmd.ProcessState.ExitCode(); code != exitFailure || !strings.Contains(older.out.String(), "partition 1: fenced") {
			t.Fatalf("older instance: exit %d, want %d with a fenced message:\n%s", code, exitFailure, older.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("older instance was not fenced within 30s:\n%s\nnewer:\n%s", older.out.String(), newer.out.String())
	}
	waitCaught(ctx, t, prod, group, raw, parts, newer, 1, 2, 3)
	newer.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-newer.done; err != nil {
		t.Fatalf("newer instance: %v after SIGTERM, want exit 0:\n%s", err, newer.out.String())
	}
	newer.done <- nil
	// Partition 0 lost its owner with the older instance; a new one finishes it.
	rest := startChild(t, writeCfg("c", "0", "info"), "")
	rest.waitOutput(t, "msg=recovered", 20*time.Second) // its signal handler is in place
	waitCaught(ctx, t, prod, group, raw, parts, rest, 0)
	checkEndpoints(t, rest)
	rest.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-rest.done; err != nil {
		t.Fatalf("last instance: %v after SIGTERM:\n%s", err, rest.out.String())
	}
	rest.done <- nil

	rep, err := w.Verify(ctx, brokers, out, dlq, parts)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
}

// checkEndpoints finds the child's metrics address in its log and checks
// /livez, /readyz and /metrics.
func checkEndpoints(t *testing.T, c *child) {
	t.Helper()
	c.waitOutput(t, "msg=\"serving metrics\" addr=", 5*time.Second)
	out := c.out.String()
	addr := out[strings.Index(out, "msg=\"serving metrics\" addr=")+len("msg=\"serving metrics\" addr="):]
	addr = strings.Fields(addr)[0]
	get := func(path string) (int, string) {
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, _ := get("/livez"); code != http.StatusOK {
		t.Errorf("/livez: %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	_, body := get("/metrics")
	for _, m := range []string{"dedupstream_records_in_total", `dedupstream_duplicates_dropped_total{partition="0",reason="history"}`, "dedupstream_ready_stages 1", "dedupstream_build_info{"} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// waitCaught waits until the committed offsets of group cover every record
// produced to raw (only the listed partitions, when given), failing the
// test if the child exits first or ctx ends.
func waitCaught(ctx context.Context, t *testing.T, prod *jobtest.Producer, group, raw string, parts int, ch *child, only ...int32) {
	t.Helper()
	for {
		ok, committed, err := prod.Caught(ctx, group, raw, parts, 1, only...)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case err := <-ch.done:
			t.Fatalf("instance exited early: %v\n%s", err, ch.out.String())
		case <-ctx.Done():
			t.Fatalf("instance did not catch up: committed %v of %v\n%s", committed, prod.End[raw], ch.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
