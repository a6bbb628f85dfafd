package job_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOutputReplaced: the job ran on its output topic; then an operator
// points output.topic at another topic under the same job id, or deletes
// the output topic and creates it again, and replays of every key arrive.
// The output is the source of truth: a store restored from the other topic
// (empty state directories: a new instance) knows none of the keys, and a
// kept store's checkpoint points into a log that is gone. The start must be
// refused (ErrTopics: exit 2) naming dedupstream migrate; a job that runs
// instead lets the replays through (counted with kgo). Then the remedy the
// refusal names: with the new topic a copy of the old one, migrate rebuilds
// the stores from it and the job drops every replay.
func TestOutputReplaced(t *testing.T) {
	for _, tc := range []struct {
		name      string
		recreate  bool // delete and create the output again; else rename
		keepState bool
	}{
		{"renamed, new instance", false, false},
		{"renamed, kept state", false, true},
		{"recreated, new instance", true, false},
		{"recreated, kept state", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			const keys = 1_000
			first, replays := replayPairs(e, "o", keys, "")
			e.produce(first)
			cfg := e.config("0, 1, 2, 3")
			r1 := e.start(cfg)
			e.waitCommitted(r1, 1, 60*time.Second)
			e.stop(r1)

			cfg2 := e.config("0, 1, 2, 3")
			if !tc.keepState {
				cfg2.State.Dir += "-new"
			}
			var old []*kgo.Record
			if tc.recreate {
				recreateTopic(t, e, e.out, partitions)
			} else {
				var err error
				if old, err = jobtest.ReadCommitted(e.ctx(60*time.Second), e.brokers, e.out, partitions, e.clientOpts...); err != nil {
					t.Fatal(err)
				}
				cfg2.Output.Topic = e.topic("orders-renamed", partitions)
			}
			e.produce(replays)
			r2 := e.start(cfg2)
			select {
			case err := <-r2.done:
				r2.done <- err
				if !errors.Is(err, job.ErrTopics) || !strings.Contains(err.Error(), "output") || !strings.Contains(err.Error(), "dedupstream migrate") {
					t.Fatalf("want ErrTopics about the output naming dedupstream migrate, got %v", err)
				}
				t.Logf("refused with: %v", err)
			case <-time.After(30 * time.Second):
				e.stop(r2)
				out, err := jobtest.ReadCommitted(e.ctx(60*time.Second), e.brokers, cfg2.Output.Topic, partitions, e.clientOpts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Fatalf("the job ran on a replaced output: %d of %d replays passed", len(out), keys)
			}
			if tc.recreate || tc.keepState {
				return
			}
			// The remedy: the new topic holds a copy of the old one.
			for _, r := range old {
				r.Topic, r.Offset = cfg2.Output.Topic, 0
			}
			e.produce(old)
			if _, err := job.Migrate(e.ctx(120*time.Second), cfg2, job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second}); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			r3 := e.start(cfg2)
			waitStaged(t, r3, keys)
			e.stop(r3)
			out, err := jobtest.ReadCommitted(e.ctx(60*time.Second), e.brokers, cfg2.Output.Topic, partitions, e.clientOpts...)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != keys {
				t.Errorf("after migrate on the copy: %d output records, want the %d copied (every replay dropped)", len(out), keys)
			}
		})
	}
}
