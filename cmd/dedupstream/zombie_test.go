package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job/jobtest"
)

// groupAssignment is assignment mode group with timeouts short enough for
// a test: a stopped member is expired after 6 s.
const groupAssignment = "{mode: group, session_timeout: 6s, heartbeat_interval: 500ms, rebalance_timeout: 20s}"

// TestGroupZombie runs two instances in assignment mode group. Instance A
// freezes itself (SIGSTOP) in the middle of a transaction, after its
// records are produced and before EndTxn; its heartbeats stop, the group
// expires it and B takes every partition over, fencing A's producers. Then
// A resumes (SIGCONT) and tries to commit that transaction: the commit must
// be refused as fenced, A must rejoin the group and share the work again,
// and the output must hold every key once.
func TestGroupZombie(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess zombie test")
	}
	e := newJobEnv(t, "zombie", 4, jobtest.Spec{Keys: 6_000, Replay: 1_500, Seed: 12}, 180*time.Second)
	// Input arrives steadily through the whole test, so that every
	// instance is always in the middle of a cycle.
	fed := e.feed(60, 80*time.Millisecond)
	commit := "{interval: 30ms, max_records: 300}"
	a := startChild(t, e.config("a", groupAssignment, commit, "info"), testhook.Produced+":15:stop")
	a.waitOutput(t, "failpoint produced: stopping myself", 30*time.Second)
	waitStopped(t, a)
	b := startChild(t, e.config("b", groupAssignment, commit, "info"), "")
	defer func() {
		if t.Failed() {
			t.Logf("instance b:\n%s", b.out.String()) // what took a's partitions over, and when
		}
	}()
	// A misses its heartbeats: after the session timeout B owns all four
	// partitions, and its recovery fences A's producers.
	b.waitOutput(t, `partitions="[0 1 2 3]"`, 30*time.Second)
	for p := range e.parts {
		b.waitOutput(t, fmt.Sprintf("msg=recovered stage=%d", p), 20*time.Second)
	}
	a.cmd.Process.Signal(syscall.SIGCONT)
	// A goes on from the failpoint: the commit of the transaction it froze
	// in (TxnOffsetCommit, then EndTxn, with the epoch B's recovery bumped)
	// must be refused as fenced.
	deadline := time.Now().Add(60 * time.Second)
	for out := a.out.String(); !strings.Contains(out, `op="txn offset commit" class=fenced`) &&
		!strings.Contains(out, `op="end txn (commit)" class=fenced`); out = a.out.String() {
		if time.Now().After(deadline) {
			t.Fatalf("the commit of the frozen transaction was not refused as fenced within 60 s:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := <-fed; err != nil {
		t.Fatal(err)
	}
	e.caught(b)
	e.term("a", a)
	e.term("b", b)
	if t.Failed() || testing.Verbose() {
		t.Logf("instance a:\n%s", a.out.String())
	}
	e.verify()
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
