package job_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
)

// TestTopicGrowsWhileRunning: an operator grows the topics with
// kafka-topics --alter --partitions while the job runs. Producers that
// learn the new count route about two thirds of the keys to other
// partitions at once, where no store saw them. The running job must not
// commit one such replay (kgo reads the output: no key twice, nothing
// beyond the first records) and must stop by itself with ErrPartitionCount
// (ErrTopics: exit 2, not a crash loop) naming `dedupstream migrate`:
// through the check before every commit when replays arrive, and through
// the watcher when the job is idle (the raw topic alone grown).
func TestTopicGrowsWhileRunning(t *testing.T) {
	refused := func(t *testing.T, r *running, topic string) {
		t.Helper()
		err := r.wait(t, 120*time.Second)
		if !errors.Is(err, job.ErrPartitionCount) || !errors.Is(err, job.ErrTopics) ||
			!strings.Contains(err.Error(), "dedupstream migrate") || !strings.Contains(err.Error(), topic) {
			t.Fatalf("want ErrPartitionCount naming %s and dedupstream migrate, got %v", topic, err)
		}
		t.Logf("stopped with: %v", err)
	}
	t.Run("replays after growth", func(t *testing.T) {
		e := newEnv(t)
		_, before, after := growWorkload(e, 3_000)
		e.produce(before)
		r := e.start(e.config("0, 1, 2, 3"))
		e.waitCommitted(r, 1, 60*time.Second)
		growAndReplay(t, e, after)
		refused(t, r, e.raw)
		if repeats, total := countRepeats(t, e, 6); repeats != 0 || total != len(before) {
			t.Errorf("%d repeats in %d output records, want 0 in %d: replays routed under the new count were committed", repeats, total, len(before))
		}
	})
	t.Run("replays after growth, group mode", func(t *testing.T) {
		e := newEnv(t)
		_, before, after := growWorkload(e, 2_000)
		e.produce(before)
		r := e.start(e.groupConfig("a"))
		e.waitCommitted(r, 1, 90*time.Second)
		growAndReplay(t, e, after)
		refused(t, r, e.raw)
		if repeats, total := countRepeats(t, e, 6); repeats != 0 || total != len(before) {
			t.Errorf("%d repeats in %d output records, want 0 in %d: replays routed under the new count were committed", repeats, total, len(before))
		}
	})
	t.Run("raw topic grown, idle job", func(t *testing.T) {
		e := newEnv(t)
		_, before, _ := growWorkload(e, 500)
		e.produce(before)
		r := e.start(e.config("0, 1, 2, 3"), func(o *job.Options) {
			testhook.Set(o, testhook.Hooks{TopicWatchEvery: 200 * time.Millisecond})
		})
		e.waitCommitted(r, 1, 60*time.Second)
		growTopics(t, e, 6, e.raw)
		refused(t, r, e.raw)
	})
}
