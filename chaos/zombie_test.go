package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// groupAssignment is assignment mode group with a 6 s session timeout: a
// frozen instance loses its partitions 6 s after its last heartbeat.
const groupAssignment = "{mode: group, session_timeout: 6s, heartbeat_interval: 500ms, rebalance_timeout: 20s}"

// TestZombie runs two instances in assignment mode group while input keeps
// arriving. Each round freezes one of them with SIGSTOP at a seeded moment,
// waits until the other owns all four partitions (the group expired the
// frozen one and the survivor's recovery fenced its producers), then resumes
// it with SIGCONT: its open transaction must be fenced, it must rejoin the
// group, and nothing it had in flight may reach the output. At the end both
// drain and stop on SIGTERM; kgo and kcat check the output.
func TestZombie(t *testing.T) {
	r := begin(t)
	rounds := r.n(1, 3)
	w := r.workload(r.n(6_000, 15_000))
	prod := r.producer()
	ctx := r.ctx(20 * time.Minute)
	total := len(w.Records)

	// Input arrives steadily over about 15 s per round, so that an
	// instance is nearly always inside a commit cycle when it freezes.
	chunk := max(total/(rounds*150), 1)
	fed := make(chan error, 1)
	go func() {
		for from := 0; from < total; from += chunk {
			if err := prod.Produce(ctx, w.Records[from:min(from+chunk, total)]); err != nil {
				fed <- err
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		fed <- nil
	}()

	inst := [2]*child{}
	for i, name := range []string{"a", "b"} {
		cfg := r.configFileWith(name, groupAssignment, filepath.Join(r.dir, "state-"+name))
		inst[i] = r.startChild(cfg, i)
	}
	// Both in the group first: a round that froze an instance before it
	// joined left the other in its first generation, which already held
	// every partition, and no rebalance came to give it a second one
	// (the takeover waited 60 s for nothing; CI, seed 1796404989592633399).
	waitShared(t, inst, 60*time.Second)
	fenced := 0
	for round := range rounds {
		time.Sleep(r.between(time.Second, 3*time.Second))
		v := r.intn(2)
		zombie, survivor := inst[v], inst[1-v]
		takeovers, recovered := countLog(survivor, ownsAll), countLog(survivor, "msg=recovered")
		zombie.cmd.Process.Signal(syscall.SIGSTOP)
		r.event("round %d: SIGSTOP instance %d; %.1f%% committed", round, v, 100*r.progress(prod, total))
		// The survivor's next generation holds every partition, and each
		// stage of it recovers: InitProducerID fences the zombie's producer.
		waitLog(t, survivor, ownsAll, takeovers+1, 60*time.Second)
		waitLog(t, survivor, "msg=recovered", recovered+parts, 60*time.Second)
		r.event("round %d: instance %d owns and recovered every partition", round, 1-v)
		joined, wasFenced := countLog(zombie, joinedLog), countLog(zombie, "fenced")
		zombie.cmd.Process.Signal(syscall.SIGCONT)
		// Resumed, the zombie learns that it lost its generation (its
		// transaction is fenced, or its heartbeat fails) and rejoins.
		waitLog(t, zombie, joinedLog, joined+1, 60*time.Second)
		wasZombieFenced := countLog(zombie, "fenced") > wasFenced
		if wasZombieFenced {
			fenced++
		}
		r.event("round %d: SIGCONT instance %d: it rejoined the group; fenced in a transaction: %v", round, v, wasZombieFenced)
	}
	if err := <-fed; err != nil {
		t.Fatal(err)
	}
	r.waitCaught(prod, inst[0].done, 3*time.Minute)
	for i, c := range inst {
		c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-c.done:
			c.done <- err
			if err != nil {
				t.Errorf("instance %d: %v after SIGTERM, want exit 0:\n%s", i, err, c.output())
			}
		case <-time.After(40 * time.Second):
			t.Fatalf("instance %d did not exit within 40s of SIGTERM:\n%s", i, c.output())
		}
	}
	r.event("%d rounds, %d zombies fenced in a transaction; both instances drained and exited 0", rounds, fenced)
	r.verify(w, nil)
}

// countLog counts the lines of a child's log that contain s.
func countLog(c *child, s string) int {
	b, _ := os.ReadFile(c.logPath)
	return strings.Count(string(b), s)
}

// joinedLog is the message an instance logs for each group generation it
// joins.
const joinedLog = "joined a consumer group generation"

// ownsAll is how an instance's log names a generation that gave it every
// partition.
var ownsAll = fmt.Sprintf("partitions=%q", fmt.Sprint(func() []int {
	all := make([]int, parts)
	for p := range all {
		all[p] = p
	}
	return all
}()))

// waitShared waits until every instance has joined the group and the
// generation each joined last gave none of them every partition.
func waitShared(t *testing.T, inst [2]*child, timeout time.Duration) {
	t.Helper()
	poll(t, timeout, func() bool {
		for _, c := range inst {
			last := lastLogLine(c, joinedLog)
			if last == "" || strings.Contains(last, ownsAll) {
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("the instances did not share the partitions within %v:\n%s\n%s", timeout, inst[0].output(), inst[1].output())
	})
}

// lastLogLine returns the child's last log line containing s ("" if none).
func lastLogLine(c *child, s string) string {
	b, _ := os.ReadFile(c.logPath)
	last := ""
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			last = l
		}
	}
	return last
}

// poll checks done every 100 ms until it holds, and fails the test with
// failure's message once timeout has passed.
func poll(t *testing.T, timeout time.Duration, done func() bool, failure func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal(failure())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitLog waits until the child's log contains s at least n times.
func waitLog(t *testing.T, c *child, s string, n int, timeout time.Duration) {
	t.Helper()
	poll(t, timeout, func() bool { return countLog(c, s) >= n }, func() string {
		return fmt.Sprintf("%q did not appear %d times within %v:\n%s", s, n, timeout, c.output())
	})
}
