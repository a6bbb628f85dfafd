package job_test

import (
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRawTopicReadded: a raw topic is taken out of input.topics and put
// back later, first in the list. Its committed offsets kept the metadata of
// the last commit that included it, generation marks and all, while the
// other topic's offsets carry the current ones. A store rebuilt after that
// (a disk lost) must restore by the current marks: the stale ones bound the
// time of the key emitted meanwhile (stamped 3h later) by the end of their
// newest generation, 3h early, the key expired at once and its replay 5m
// after it passed.
func TestRawTopicReadded(t *testing.T) {
	T := time.Now().Add(-4 * time.Hour).Truncate(time.Millisecond)
	ids := keysOn(0, 3)
	e := newEnv(t)
	raw2 := e.topic("orders-raw2", partitions)
	rec := orderAt(e.raw, T)
	cfg := e.config("0, 1, 2, 3", raw2)
	cfg.Dedup.Window = time.Hour
	a2 := rec(ids[0], 0, 1)
	a2.Topic = raw2
	e.produce([]*kgo.Record{rec(ids[1], 0, 1), a2})
	e.runToEnd(cfg)

	only := e.config("0, 1, 2, 3") // raw2 taken out
	only.Dedup.Window = time.Hour
	e.produce([]*kgo.Record{rec(ids[2], 3*time.Hour, 1)})
	e.runToEnd(only)

	both := e.config("0, 1, 2, 3", raw2)
	both.Dedup.Window = time.Hour
	both.Input.Topics = []string{raw2, e.raw} // put back, first
	if err := os.RemoveAll(both.State.Dir); err != nil {
		t.Fatal(err)
	}
	e.produce([]*kgo.Record{rec(ids[2], 3*time.Hour+5*time.Minute, 2)})
	e.runToEnd(both)
	if n := e.outputOf(ids[2], T); n != 1 {
		t.Errorf("key %q is %d times in the output, want once: its replay came 5m after it", ids[2], n)
	}
}
