package main

import (
	"fmt"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

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
	e := newJobEnv(t, "scale", 6, jobtest.Spec{Keys: 140_000, Replay: 20_000, Seed: 31}, 4*time.Minute)
	if len(e.w.Records) < 200_000 {
		t.Fatalf("workload has %d records, want at least 200k", len(e.w.Records))
	}
	// Input arrives through the whole schedule, about 40 s of it.
	fed := e.feed(500, 100*time.Millisecond)
	cfgPath := func(slot int) string {
		return e.config(fmt.Sprintf("slot-%d", slot), groupAssignment, "{interval: 50ms, max_records: 2000}", "info")
	}

	schedule := []int{1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2, 1}
	const killAt = 7 // the step 3 -> 2 of the second round kills instead
	var running, all []*child
	for step, want := range schedule {
		for len(running) < want {
			ch := startChild(t, cfgPath(len(running)), "")
			running, all = append(running, ch), append(all, ch)
		}
		for len(running) > want {
			ch := running[len(running)-1]
			running = running[:len(running)-1]
			if step != killAt {
				e.term(fmt.Sprintf("of step %d", step), ch)
				continue
			}
			ch.cmd.Process.Signal(syscall.SIGKILL)
			<-ch.done
			ch.done <- nil
			t.Logf("step %d: killed an instance with SIGKILL", step)
		}
		time.Sleep(3 * time.Second)
	}
	if err := <-fed; err != nil {
		t.Fatal(err)
	}
	e.caught(running[0])
	e.term("last", running[0])

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
	t.Logf("%d instances started, the group reached generation %d", len(all), gen)
	e.verify()
}
