package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job/jobtest"
)

// child is "dedupstream run" as a subprocess, its output in a file.
type child struct {
	cmd     *exec.Cmd
	done    chan error
	logPath string
}

func (r *run) startChild(cfg string, n int) *child {
	r.t.Helper()
	c := &child{done: make(chan error, 1), logPath: filepath.Join(r.dir, fmt.Sprintf("run-%02d.log", n))}
	f, err := os.Create(c.logPath)
	if err != nil {
		r.t.Fatal(err)
	}
	c.cmd = exec.Command(dedupBin, "run", "--config", cfg)
	c.cmd.Stdout, c.cmd.Stderr = f, f
	if err := c.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		c.done <- c.cmd.Wait()
		f.Close()
	}()
	r.t.Cleanup(func() {
		c.cmd.Process.Kill()
		err := <-c.done
		c.done <- err
	})
	return c
}

// output returns the last lines the child wrote.
func (c *child) output() string {
	b, _ := os.ReadFile(c.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// waitProgress waits until frac of the total input is committed, failing
// if the child exits first.
func (r *run) waitProgress(prod *jobtest.Producer, total int, frac float64, c *child, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for r.progress(prod, total) < frac {
		select {
		case err := <-c.done:
			c.done <- err
			r.t.Fatalf("run exited on its own before %.0f%% progress: %v\n%s", frac*100, err, c.output())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no %.0f%% progress within %v:\n%s", frac*100, timeout, c.output())
		}
	}
}

// TestKillJob SIGKILLs "dedupstream run" again and again at seeded moments
// while input keeps arriving, the first time only once 20% of all input is
// committed; a last run drains the input and stops on SIGTERM with exit 0.
func TestKillJob(t *testing.T) {
	r := begin(t)
	kills := r.n(6, 24)
	w := r.workload(r.n(6_000, 20_000))
	prod := r.producer()
	cfg := r.configFile("run")
	ctx := r.ctx(20 * time.Minute)
	total := len(w.Records)
	produced := 0
	var fedUpTo atomic.Int64 // produced, for reading while a feeder runs
	feed := func(n int) {
		n = min(produced+n, total)
		if err := prod.Produce(ctx, w.Records[produced:n]); err != nil {
			t.Error(err)
			return
		}
		produced = n
		fedUpTo.Store(int64(n))
	}
	// A quarter first, so that the 20% mark falls in the first run; the
	// rest in equal parts, each fed while a run works.
	feed(total / 4)
	if t.Failed() {
		t.FailNow()
	}
	chunk := (total - produced + kills) / kills
	for i := range kills {
		c := r.startChild(cfg, i)
		start := time.Now()
		if i == 0 {
			r.waitProgress(prod, total, 0.2, c, 2*time.Minute)
		}
		fed := make(chan struct{})
		go func() { // input keeps arriving while the run works
			defer close(fed)
			for range 10 {
				feed(chunk / 10)
				time.Sleep(30 * time.Millisecond)
			}
		}()
		wait := r.between(100*time.Millisecond, 1200*time.Millisecond)
		select {
		case err := <-c.done:
			c.done <- err
			<-fed
			t.Fatalf("run %d exited on its own: %v\n%s", i, err, c.output())
		case <-time.After(wait):
		}
		c.cmd.Process.Signal(syscall.SIGKILL)
		err := <-c.done
		c.done <- err
		if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			<-fed
			t.Fatalf("run %d ended with %v before the SIGKILL:\n%s", i, err, c.output())
		}
		at := fedUpTo.Load()
		<-fed
		if t.Failed() {
			t.FailNow()
		}
		r.event("kill %d/%d: SIGKILL %v after start (fault delay %v); %d of %d records produced, %.1f%% committed",
			i+1, kills, time.Since(start).Round(time.Millisecond), wait.Round(time.Millisecond), at, total, 100*r.progress(prod, total))
	}
	feed(total)
	if t.Failed() {
		t.FailNow()
	}

	last := r.startChild(cfg, kills)
	r.waitCaught(prod, last.done, 3*time.Minute)
	last.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-last.done:
		last.done <- err
		if err != nil {
			t.Fatalf("last run: %v after SIGTERM, want exit 0:\n%s", err, last.output())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("last run did not exit within 40s of SIGTERM:\n%s", last.output())
	}
	r.event("last run drained the input and exited 0 on SIGTERM")
	r.verify(w, nil)
}
