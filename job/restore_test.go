package job_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/partition"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestoreWindow: a store rebuilt from nothing reads only the part of
// the committed output that is still inside the window. Orders four hours
// older than the rest (window 1h) are in the output first; after the state
// directory is lost, the restore must read exactly the newer orders' output
// records, and replays of newer orders must still be dropped.
func TestRestoreWindow(t *testing.T) {
	e := newEnv(t)
	w := e.workload(41, 3_000, 0)
	newKeys := len(w.First)
	now := time.Now().Truncate(time.Millisecond)
	var old []*kgo.Record
	for i := range 1_000 {
		id := fmt.Sprintf("old-%d", i)
		v := fmt.Appendf(nil, `{"order_id":%q,"msg_id":"old","amount":%d}`, id, i)
		w.First[id] = v
		old = append(old, &kgo.Record{Topic: e.raw, Key: []byte(id), Value: v,
			Partition: int32(partition.Murmur2Partition([]byte(id), partitions)),
			Timestamp: now.Add(-5*time.Hour + time.Duration(i)*time.Millisecond)})
	}
	for i, r := range w.Records {
		r.Timestamp = now.Add(-time.Hour + time.Duration(i)*time.Millisecond)
	}
	var replays []*kgo.Record
	for _, r := range w.Records[len(w.Records)/2:] {
		if string(r.Value) == string(w.First[string(r.Key)]) && len(replays) < 500 {
			c := *r
			replays = append(replays, &c)
		}
	}
	w.Records = append(append(old, w.Records...), replays...)

	cfg := e.config("0, 1, 2, 3")
	cfg.Dedup.Window = time.Hour
	r1 := e.start(cfg)
	e.produce(w.Records[:len(w.Records)-len(replays)])
	e.waitCommitted(r1, 1, 30*time.Second)
	e.stop(r1)
	if err := os.RemoveAll(cfg.State.Dir); err != nil {
		t.Fatal(err)
	}
	e.produce(replays)
	r2 := e.start(cfg)
	e.waitCommitted(r2, 1, 30*time.Second)
	e.stop(r2)
	s1, s2 := r1.job.Stats(), r2.job.Stats()
	if s2.Restored != uint64(newKeys) {
		t.Errorf("restored %d output records, want the %d inside the window (the output holds %d)", s2.Restored, newKeys, s1.Emitted)
	}
	e.verify(w, sum(s1, s2))
}
