package job_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
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
	e.runToEnd(cfg)

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

// TestStateDirOfAnotherJob: jobs A (400 keys) and B (1200 other keys) ran
// with their own state directories and outputs; then B is started on A's
// directory (a config copied with its state.dir). A's store holds keys B
// never emitted, and its output offsets (about 100 per partition) point
// into A's log, below the ends of B's output (about 300): a stage trusting
// it restores only B's tail past them, and replays of B's first keys pass.
// The start must be refused naming the directory; kgo then finds B's 1200
// first records in B's output and no replay.
func TestStateDirOfAnotherJob(t *testing.T) {
	e := newEnv(t)
	rawB, outB := e.topic("orders-raw-b", partitions), e.topic("orders-b", partitions)
	order := func(topic, prefix string, i, msg int) *kgo.Record {
		id := fmt.Sprintf("%s-%d", prefix, i)
		return &kgo.Record{Topic: topic, Partition: int32(i % partitions), Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"msg":%d}`, id, msg)}
	}
	var recs, replays []*kgo.Record
	for i := range 400 {
		recs = append(recs, order(e.raw, "a", i, 1))
	}
	for i := range 1200 {
		recs = append(recs, order(rawB, "b", i, 1))
		replays = append(replays, order(rawB, "b", i, 2))
	}
	e.produce(recs)
	cfgA, cfgB := e.config("0, 1, 2, 3"), e.config("0, 1, 2, 3")
	cfgB.Job.ID += "-b"
	cfgB.Input.Topics, cfgB.Output.Topic, cfgB.State.Dir = []string{rawB}, outB, cfgB.State.Dir+"-b"
	runUntilCaught := func(cfg *config.Config) {
		t.Helper()
		r := e.start(cfg)
		defer e.stop(r)
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			caught, c, err := e.prod.Caught(e.ctx(10*time.Second), cfg.Job.ID, cfg.Input.Topics[0], partitions, 1)
			if caught && err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s committed %v of its input within 60s (%v)", cfg.Job.ID, c, err)
			}
		}
	}
	runUntilCaught(cfgA)
	runUntilCaught(cfgB)

	cfgB.State.Dir = cfgA.State.Dir
	e.produce(replays)
	r := e.start(cfgB)
	select {
	case err := <-r.done:
		r.done <- err
		if err == nil || !strings.Contains(err.Error(), cfgA.State.Dir) || !strings.Contains(err.Error(), "belongs to another job") {
			t.Fatalf("want a refusal naming %s as another job's, got %v", cfgA.State.Dir, err)
		}
		t.Logf("refused with: %v", err)
	case <-time.After(30 * time.Second):
		e.stop(r)
	}
	out, err := jobtest.ReadCommitted(e.ctx(60*time.Second), e.brokers, outB, partitions, e.clientOpts...)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1200 {
		t.Errorf("%d records in B's output, want its 1200 first ones: %d replays passed", len(out), len(out)-1200)
	}
}
