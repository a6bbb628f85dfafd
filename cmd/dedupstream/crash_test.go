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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job/jobtest"
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
	e := newJobEnv(t, "killloop", 4, jobtest.Spec{Keys: 6_000, Replay: 1_500, Seed: 4}, 90*time.Second)
	w := e.w
	cfgPath := e.config("job", "{partitions: [0, 1, 2, 3]}", "{interval: 30ms, max_records: 500}", "warn")

	rng := rand.New(rand.NewPCG(5, 5))
	const kills = 12
	chunk := (len(w.Records) + kills) / (kills + 1)
	produced := 0
	feed := func() {
		n := min(produced+chunk, len(w.Records))
		e.produce(produced, n)
		produced = n
	}
	var hit [4]int
	for i := range kills {
		feed()
		fp := ""
		switch i % 4 {
		case 1:
			fp = fmt.Sprintf("%s:%d", testhook.Produced, 1+rng.IntN(3))
		case 2:
			fp = fmt.Sprintf("%s:%d", testhook.Committed, 1+rng.IntN(3))
		case 3:
			// The previous run died between EndTxn and the store commit,
			// so this one starts with a store behind the output.
			fp = testhook.Restored + ":1"
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
	e.caught(last)
	e.term("last", last)
	e.verify()
}

// TestOverlappingInstances runs two "dedupstream run" processes whose
// static assignments share partition 1: the older one must be fenced and
// exit 3 with a message saying so, and the output must stay clean.
func TestOverlappingInstances(t *testing.T) {
	e := newJobEnv(t, "overlap", 4, jobtest.Spec{Keys: 3_000, Replay: 500, Seed: 8}, 60*time.Second)
	static := func(parts string) string { return "{partitions: [" + parts + "]}" }
	const commit = "{interval: 30ms}"
	half := len(e.w.Records) / 2
	e.produce(0, half)
	older := startChild(t, e.config("a", static("0, 1"), commit, "warn"), "")
	e.caught(older, 0, 1)
	newer := startChild(t, e.config("b", static("1, 2, 3"), commit, "info"), "")
	// The older instance learns it is fenced only when it writes again:
	// give it input once the newer one has taken partition 1 over.
	newer.waitOutput(t, "msg=recovered stage=1", 20*time.Second)
	e.produce(half, len(e.w.Records))
	select {
	case err := <-older.done:
		older.done <- err
		out := older.out.String()
		if code := older.cmd.ProcessState.ExitCode(); code != exitFenced || !strings.Contains(out, "partition 1: fenced: another instance took over") {
			t.Fatalf("older instance: exit %d, want %d with a message naming another instance:\n%s", code, exitFenced, out)
		}
		// No signal came: the log must not claim one, and its last
		// record says why the process stopped.
		if strings.Contains(out, "signal received") {
			t.Errorf("older instance logged a signal it never received:\n%s", out)
		}
		if last := lastLogRecord(out); !strings.Contains(last, "stopped: fenced") || !strings.Contains(last, "exit_code=3") {
			t.Errorf("older instance's last log record does not say it stopped fenced with exit code 3: %q", last)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("older instance was not fenced within 30s:\n%s\nnewer:\n%s", older.out.String(), newer.out.String())
	}
	e.caught(newer, 1, 2, 3)
	e.term("newer", newer)
	// Partition 0 lost its owner with the older instance; a new one finishes it.
	rest := startChild(t, e.config("c", static("0"), commit, "info"), "")
	rest.waitOutput(t, "msg=recovered", 20*time.Second) // its signal handler is in place
	e.caught(rest, 0)
	checkEndpoints(t, rest)
	e.term("last", rest)
	e.verify()
}

// endpoints finds the child's metrics address in its log and returns a GET
// of a path there: status code and body.
func (c *child) endpoints(t *testing.T) func(path string) (int, string) {
	t.Helper()
	c.waitOutput(t, "msg=\"serving metrics\" addr=", 5*time.Second)
	out := c.out.String()
	addr := out[strings.Index(out, "msg=\"serving metrics\" addr=")+len("msg=\"serving metrics\" addr="):]
	addr = strings.Fields(addr)[0]
	return func(path string) (int, string) {
		t.Helper()
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
}

// lastLogRecord returns the last slog record ("time=... level=...") of a
// child's output; the error line printed after it is left out.
func lastLogRecord(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "time=") {
			return lines[i]
		}
	}
	return ""
}

// checkEndpoints finds the child's metrics address in its log and checks
// /livez, /readyz and /metrics.
func checkEndpoints(t *testing.T, c *child) {
	t.Helper()
	get := c.endpoints(t)
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
