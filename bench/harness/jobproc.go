package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// JobProcess runs the two jobs of a real-cluster case (dedupstream and the
// copy job) each in a process of its own, so that their CPU time is theirs
// alone: the harness's offset polling, the stream's producer and the
// read-back stay in dsbench. The child is dsbench itself (Exe, started with
// -child), pinned with taskset to CPUs when set; its CPU time is read from
// /proc/<pid>/stat (user + system, every thread) at "every partition
// ready" and at "every input offset committed", so start-up, recovery and
// shutdown are left out as they are from records/s.
type JobProcess struct {
	Exe  string // dsbench's own executable
	CPUs string // taskset -c list; empty: not pinned
	// CPUProfile, when set, is a path prefix: each child writes a CPU
	// profile of its timed span to CPUProfile-<arm>-<rep>.pprof.
	CPUProfile string
}

// ChildFlag is the dsbench flag that turns a process into a job child; its
// value is the path of the child's spec (JSON).
const ChildFlag = "child"

// childSpec is what a job child runs.
type childSpec struct {
	System     string // SysDedup or SysCopy
	Case       E2ECase
	Brokers    []string
	Raw        []string
	Out        string
	CPUProfile string
}

// childStats is what a child reports on its last line of standard output.
type childStats struct {
	In, StoreReads, FalsePositives, BloomNegative, DeadLettered uint64
	DiskBytes                                                   uint64
	Job                                                         *JobTimes // the job's latency histograms
	Err                                                         string
}

const childReady = "dsbench-child: ready"

// RunChild is the body of a job child (dsbench -child SPEC): it starts the
// job of the spec, prints childReady once every partition is ready, starts
// the CPU profile if asked, and on SIGTERM (or SIGINT) stops the job and
// prints its childStats as one JSON line. It returns the exit code.
func RunChild(specPath string) int {
	b, err := os.ReadFile(specPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dsbench child:", err)
		return 1
	}
	var s childSpec
	if err := json.Unmarshal(b, &s); err != nil {
		fmt.Fprintln(os.Stderr, "dsbench child:", specPath, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var st childStats
	err = runChildJob(ctx, s, &st)
	if err != nil {
		st.Err = err.Error()
	}
	line, _ := json.Marshal(st)
	fmt.Println(string(line))
	if err != nil {
		return 1
	}
	return 0
}

func runChildJob(ctx context.Context, s childSpec, st *childStats) error {
	profile := func() (func(), error) {
		if s.CPUProfile == "" {
			return func() {}, nil
		}
		f, err := os.Create(s.CPUProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		return func() { pprof.StopCPUProfile(); f.Close() }, nil
	}
	switch s.System {
	case SysDedup:
		rj, err := startDedup(ctx, s.Case, s.Brokers, s.Raw, s.Out)
		if err != nil {
			return err
		}
		fmt.Println(childReady)
		end, err := profile()
		if err != nil {
			rj.stop()
			return err
		}
		select {
		case <-ctx.Done():
		case err := <-rj.done:
			rj.done <- err
		}
		end()
		st.DiskBytes = dirBytes(filepath.Join(rj.dir, "state"))
		err = rj.stop()
		js := rj.j.Stats()
		st.Job = jobTimes(rj.j.Collector())
		st.In, st.StoreReads, st.FalsePositives, st.BloomNegative, st.DeadLettered = js.In, js.StoreReads, js.FalsePositives, js.BloomNegative, js.DeadLettered
		return err
	case SysCopy:
		cj := newCopyJob(s.Case, s.Brokers, s.Raw, s.Out)
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		ready := make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- cj.Run(runCtx, func() { close(ready) }) }()
		select {
		case <-ready:
		case err := <-done:
			return fmt.Errorf("copy job stopped before it was ready: %v", err)
		}
		fmt.Println(childReady)
		end, err := profile()
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case err := <-done:
			done <- err
		}
		end()
		cancel()
		return <-done
	}
	return fmt.Errorf("no job child for system %q", s.System)
}

// jobChild is a running job process.
type jobChild struct {
	system string
	cmd    *exec.Cmd
	pid    int
	dir    string
	last   chan string // the child's last line of output, once its output ends
	done   chan error  // an end of the child (before stop: a failure)
	ended  bool
}

// start starts a child running system over raw into out and returns once
// every partition of it is ready.
func (jp *JobProcess) start(ctx context.Context, system, label string, rep int, c E2ECase, brokers, raw []string, out string) (*jobChild, error) {
	dir, err := os.MkdirTemp(c.Dir, "dsbench-child-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*jobChild, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	s := childSpec{System: system, Case: c, Brokers: brokers, Raw: raw, Out: out}
	s.Case.Dir = dir
	if jp.CPUProfile != "" {
		s.CPUProfile = fmt.Sprintf("%s-%s-%d.pprof", jp.CPUProfile, strings.ReplaceAll(label, " ", "_"), rep)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fail(err)
	}
	spec := filepath.Join(dir, "child.json")
	if err := os.WriteFile(spec, b, 0o644); err != nil {
		return fail(err)
	}
	args := []string{jp.Exe, "-" + ChildFlag, spec}
	if jp.CPUs != "" {
		args = append([]string{"taskset", "-c", jp.CPUs}, args...) // taskset execs: same pid, every thread pinned
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail(err)
	}
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	ch := &jobChild{system: system, cmd: cmd, pid: cmd.Process.Pid, dir: dir, last: make(chan string, 1), done: make(chan error, 1)}
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				err := cmd.Wait()
				os.RemoveAll(dir)
				return nil, fmt.Errorf("%s child (pid %d) ended before it was ready: %v", system, ch.pid, err)
			}
			ready = l == childReady
		case <-ctx.Done():
			ch.kill()
			return nil, ctx.Err()
		}
	}
	// The child writes nothing more until it stops: its last line, when
	// its output ends, is its stats; an end before stop is a failure.
	go func() {
		var l string
		for x := range lines {
			l = x
		}
		ch.last <- l
		ch.done <- fmt.Errorf("the child stopped early: %s", l)
	}()
	return ch, nil
}

// cpu is the child's user+system CPU seconds so far.
func (ch *jobChild) cpu() float64 { return procsCPU([]int{ch.pid}) }

// kill ends the child at once (on a failure); a stopped child is left.
func (ch *jobChild) kill() {
	if ch.ended {
		return
	}
	ch.ended = true
	ch.cmd.Process.Kill()
	ch.cmd.Wait()
	os.RemoveAll(ch.dir)
}

// stop ends the child as SIGTERM does and returns the stats it printed.
func (ch *jobChild) stop() (childStats, error) {
	var st childStats
	if ch.ended {
		return st, errors.New("the child was stopped already")
	}
	ch.ended = true
	defer os.RemoveAll(ch.dir)
	ch.cmd.Process.Signal(syscall.SIGTERM)
	stats := <-ch.last
	werr := ch.cmd.Wait()
	if err := json.Unmarshal([]byte(stats), &st); err != nil {
		return st, fmt.Errorf("%s child (pid %d): no stats line (%q): %v", ch.system, ch.pid, stats, werr)
	}
	if st.Err != "" || werr != nil {
		return st, fmt.Errorf("%s child (pid %d): %s (%v)", ch.system, ch.pid, st.Err, werr)
	}
	if st.DeadLettered > 0 {
		return st, fmt.Errorf("job dead-lettered %d records of a stream without poison records", st.DeadLettered)
	}
	return st, nil
}

// run runs arm system (SysDedup or SysCopy) in a child process and
// waits until it committed every input offset; it returns the time from
// "ready" to then and the child's CPU seconds over that span.
func (jp *JobProcess) run(ctx context.Context, system, label string, c E2ECase, brokers, raw []string, out string,
	cl *kgo.Client, ends map[string][]int64, p *Progress, r *Result) (time.Duration, float64, error) {
	ch, err := jp.start(ctx, system, label, r.Rep, c, brokers, raw, out)
	if err != nil {
		return 0, 0, err
	}
	defer ch.kill()
	cpu0 := ch.cpu()
	start := time.Now()
	if err := waitCommitted(ctx, cl, out, ends, ch.done, p, label+" "+out, start, nil); err != nil {
		return 0, 0, err
	}
	took := time.Since(start)
	cpu := ch.cpu() - cpu0
	st, err := ch.stop()
	if err != nil {
		return 0, 0, err
	}
	if system == SysDedup {
		if st.In > 0 {
			r.StoreReadsPerRecord = float64(st.StoreReads) / float64(st.In)
		}
		if n := st.FalsePositives + st.BloomNegative; n > 0 {
			r.BloomFPRate = float64(st.FalsePositives) / float64(n)
		}
		r.DiskBytesPerKey = float64(st.DiskBytes) / float64(c.Spec.KeysPerWindow)
	}
	return took, cpu, nil
}
