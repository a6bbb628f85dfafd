package job_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/twmb/franz-go/pkg/kgo"
)

// clockWorkload is the input of the restore-clock tests, produced in this
// order with window 1h (4 generations, max_future_skew 5m, so a new store
// restores what is at most 80m older than the newest output record on the
// stage clock): outside keys stamped now-84m (must not be restored),
// inside keys at now-76m (must be), keys ~0.9 window old at now-54m, the
// bulk at now-40m, and a few dozen stamped now+55m, which the stage clock
// counts as now. replays are produced later, stamped at that time, with new
// message ids: every one must be dropped.
type clockWorkload struct {
	w                 *jobtest.Workload
	first, replays    []*kgo.Record
	outside, restored int
}

func newClockWorkload(e *env, now time.Time) *clockWorkload {
	c := &clockWorkload{w: &jobtest.Workload{Spec: jobtest.Spec{Topic: e.raw, Partitions: partitions}, First: map[string][]byte{}}}
	futureParts := map[int32]bool{}
	// Every replayEvery-th key of a kind is replayed (0: none).
	add := func(kind string, n int, ts time.Time, replayEvery int) {
		for i := range n {
			id := fmt.Sprintf("%s-%d", kind, i)
			p := int32(partition.Murmur2Partition([]byte(id), partitions))
			v := fmt.Appendf(nil, `{"order_id":%q,"msg_id":"first","amount":%d}`, id, i)
			c.w.First[id] = v
			c.first = append(c.first, &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id), Value: v, Timestamp: ts.Add(time.Duration(i) * time.Millisecond)})
			if kind == "future" {
				futureParts[p] = true
			}
			if replayEvery > 0 && i%replayEvery == 0 {
				c.replays = append(c.replays, &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id),
					Value: fmt.Appendf(nil, `{"order_id":%q,"msg_id":"replay","amount":%d}`, id, i)})
			}
		}
	}
	add("outside", 300, now.Add(-84*time.Minute), 0)
	c.outside = 300
	add("inside", 300, now.Add(-76*time.Minute), 0)
	add("old", 600, now.Add(-54*time.Minute), 1)
	add("bulk", 6_000, now.Add(-40*time.Minute), 3)
	add("future", 40, now.Add(55*time.Minute), 0)
	if len(futureParts) != partitions {
		e.t.Fatalf("future-stamped keys reach only partitions %v", futureParts)
	}
	c.restored = len(c.first) - c.outside
	c.w.Records = append(append([]*kgo.Record{}, c.first...), c.replays...)
	return c
}

// TestRestoreClock: after the state directory is lost, the restore must
// read the output on the clock the stage decides with. Output stamped ahead
// of the wall clock must not move the restored span later (it did: the
// newest raw timestamp was taken, and keys 40 minutes old were forgotten),
// records just inside the span are restored and those just outside are
// not, and replays of keys up to ~0.9 window old are all dropped. A
// restore span of window/2 fails here.
func TestRestoreClock(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	c := newClockWorkload(e, now)
	cfg := e.config("0, 1, 2, 3")
	cfg.Dedup.Window = time.Hour
	r1 := e.start(cfg)
	e.produce(c.first)
	e.waitCommitted(r1, 1, 60*time.Second)
	e.stop(r1)
	if err := os.RemoveAll(cfg.State.Dir); err != nil {
		t.Fatal(err)
	}
	e.produce(c.replays)
	r2 := e.start(cfg)
	e.waitCommitted(r2, 1, 60*time.Second)
	e.stop(r2)
	if time.Since(now) > 3*time.Minute {
		t.Fatalf("the test took %v: the inside/outside margins (4m) no longer hold", time.Since(now))
	}
	s1, s2 := r1.job.Stats(), r2.job.Stats()
	if s1.Emitted != uint64(len(c.first)) {
		t.Fatalf("first run emitted %d, want %d", s1.Emitted, len(c.first))
	}
	if s2.Restored != uint64(c.restored) {
		t.Errorf("restored %d output records, want %d: all but the %d stamped 84m before now", s2.Restored, c.restored, c.outside)
	}
	e.verify(c.w, sum(s1, s2))
}

// TestRestoreClockGroup: the same output, but nothing is deleted: a second
// group-mode instance with an empty state directory takes half of the
// partitions over, restores them, and must drop every replay.
func TestRestoreClockGroup(t *testing.T) {
	e := newEnv(t)
	c := newClockWorkload(e, time.Now())
	group := func(name string) *config.Config {
		cfg := e.groupConfig(name)
		cfg.Dedup.Window = time.Hour
		return cfg
	}
	a := e.start(group("a"))
	e.waitAssigned(30*time.Second, a)
	e.produce(c.first)
	e.waitCommitted(a, 1, 60*time.Second)
	b := e.start(group("b"))
	e.waitAssigned(30*time.Second, a, b)
	e.produce(c.replays)
	e.waitCommitted(b, 1, 60*time.Second)
	e.stop(b)
	e.stop(a)
	sa, sb := a.job.Stats(), b.job.Stats()
	if sb.Restored == 0 {
		t.Fatalf("instance b restored nothing when it took partitions over: %+v", sb)
	}
	e.verify(c.w, sum(sa, sb))
}
