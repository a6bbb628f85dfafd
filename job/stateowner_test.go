package job_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStateDirCopied: an operator replaces partition 2's state directory
// with a copy of partition 1's (a backup restored into the wrong place).
// Partition 1 emitted 100 keys, partition 2 1000; the copy's checkpoint
// points at output offset ~100 of partition 2, so a stage trusting it
// restores only the tail and lets replays of the first ~100 keys of
// partition 2 pass. The start must be refused naming the directory; kgo
// then finds no record beyond the first 1100.
func TestStateDirCopied(t *testing.T) {
	e := newEnv(t)
	var first, replays []*kgo.Record
	for p, n := range map[int32]int{1: 100, 2: 1000} {
		for i := range n {
			id := fmt.Sprintf("c-%d-%d", p, i)
			first = append(first, &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"msg":1}`, id)})
			if p == 2 {
				replays = append(replays, &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"msg":2}`, id)})
			}
		}
	}
	e.produce(first)
	cfg := e.config("0, 1, 2, 3")
	r1 := e.start(cfg)
	e.waitCommitted(r1, 1, 60*time.Second)
	e.stop(r1)

	dir1, dir2 := job.StateDir(cfg.State.Dir, 1), job.StateDir(cfg.State.Dir, 2)
	if err := os.RemoveAll(dir2); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", dir1, dir2).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	e.produce(replays)
	r2 := e.start(cfg)
	select {
	case err := <-r2.done:
		r2.done <- err
		if err == nil || !strings.Contains(err.Error(), dir2) || !strings.Contains(err.Error(), "copied or renamed") {
			t.Fatalf("want a refusal naming %s as copied, got %v", dir2, err)
		}
		t.Logf("refused with: %v", err)
	case <-time.After(30 * time.Second):
		e.stop(r2)
	}
	out, err := jobtest.ReadCommitted(e.ctx(60*time.Second), e.brokers, e.out, partitions, e.clientOpts...)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(first) {
		t.Errorf("%d output records, want the %d first ones: %d replays passed", len(out), len(first), len(out)-len(first))
	}
}
