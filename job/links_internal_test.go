package job

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestLinks drives one link through an outage on a fake clock: reported
// once after UnreachableAfter with a request waiting, once when an answer
// comes (with the outage's length), and not at all when the process itself
// stood still.
func TestLinks(t *testing.T) {
	var logs bytes.Buffer
	now := time.Unix(1000, 0)
	l := newLinks(5*time.Second, slog.New(slog.NewTextHandler(&logs, nil)))
	l.now = func() time.Time { return now }
	step := func(d time.Duration) {
		for end := now.Add(d); now.Before(end); {
			now = now.Add(time.Second)
			l.check()
		}
	}
	l.client(3, &kafka.Client{})
	lk := l.parts[3]

	l.begin(lk)
	l.end(lk, nil)
	l.begin(lk) // a fetch that hangs
	step(4 * time.Second)
	if parts, _ := l.unreachable(); len(parts) != 0 || strings.Contains(logs.String(), "not answering") {
		t.Fatalf("reported before unreachable_after: %v\n%s", parts, logs.String())
	}
	step(2 * time.Second)
	if parts, ages := l.unreachable(); len(parts) != 1 || parts[0] != 3 || ages[0] < 5*time.Second {
		t.Fatalf("not reported after unreachable_after: %v %v\n%s", parts, ages, logs.String())
	}
	l.end(lk, errors.New("i/o timeout"))
	l.begin(lk)
	l.end(lk, errors.New("i/o timeout")) // retries fail
	step(20 * time.Second)
	if n := strings.Count(logs.String(), "brokers not answering"); n != 1 {
		t.Fatalf("%d warnings during one outage, want 1:\n%s", n, logs.String())
	}
	l.begin(lk)
	l.end(lk, nil)
	if !strings.Contains(logs.String(), "brokers answer again") || !strings.Contains(logs.String(), "outage=26s") {
		t.Fatalf("the end of the outage is not logged with its length:\n%s", logs.String())
	}
	if parts, _ := l.unreachable(); len(parts) != 0 {
		t.Fatalf("still unreachable after an answer: %v", parts)
	}

	// The process stands still for 30 s with a request in flight: that is
	// said, and the link is not reported while the answer is read.
	logs.Reset()
	l.begin(lk)
	now = now.Add(30 * time.Second)
	l.check()
	step(2 * time.Second)
	l.end(lk, nil)
	step(10 * time.Second)
	if strings.Contains(logs.String(), "not answering") || !strings.Contains(logs.String(), "did not run") {
		t.Fatalf("a stalled process was reported as unreachable brokers:\n%s", logs.String())
	}
}
