package job_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRouteChange: in repartition mode the route step places a key on
// partition murmur2(business key) mod N, so the output's layout depends on
// dedup.key, and in input mode it is whatever the producers did. The job
// runs, stops, and starts again on the same state directories (or on
// empty ones, as a new instance) with the route changed: another
// dedup.key in repartition mode, or input mode switched to repartition.
// Replays of every key then arrive. A stage restored from its own output
// partition holds only the keys routed there under the old route, so the
// start must be refused (exit 2: ErrTopics) until `dedupstream migrate`
// rebuilt the stores under the new route; after migrate, the output read
// back with kgo must hold no key twice.
func TestRouteChange(t *testing.T) {
	for _, tc := range []struct {
		name       string
		before     func(*config.Config)
		after      func(*config.Config)
		emptyDisks bool
		refused    bool // the second start must refuse
	}{
		{"repartition key order_id to order_id + status",
			func(c *config.Config) { c.Input.Partitioning = "repartition" },
			func(c *config.Config) {
				c.Input.Partitioning = "repartition"
				c.Dedup.Key = []string{"json:order_id", "json:status"}
			}, false, true},
		{"repartition key changed, empty disks",
			func(c *config.Config) { c.Input.Partitioning = "repartition" },
			func(c *config.Config) {
				c.Input.Partitioning = "repartition"
				c.Dedup.Key = []string{"json:order_id", "json:status"}
			}, true, true},
		{"input to repartition",
			func(*config.Config) {},
			func(c *config.Config) { c.Input.Partitioning = "repartition" }, false, true},
		{"input partitioner fnv1a to murmur2",
			func(c *config.Config) { c.Input.Partitioner = "fnv1a" },
			func(*config.Config) {}, false, true},
		// The same route under other words: input mode on the Kafka key
		// with murmur2 and repartition mode on the Kafka key. The records
		// sit where murmur2 puts them, as input mode promises.
		{"input to repartition on the kafka key (same route)",
			func(c *config.Config) { c.Dedup.Key = []string{"key"} },
			func(c *config.Config) { c.Input.Partitioning, c.Dedup.Key = "repartition", []string{"key"} }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			const keys = 2_000
			var first, replays []*kgo.Record
			for i := range keys {
				id := fmt.Sprintf("r-%d", i)
				// The producers key by customer: records of one order stay
				// on one partition, as input mode requires, but not on
				// murmur2(order_id)'s.
				p, q := int32(i%partitions), int32(i%partitions)
				switch tc.name {
				case "input to repartition on the kafka key (same route)":
					p = int32(partition.Murmur2Partition([]byte(id), partitions))
					q = p
				case "input partitioner fnv1a to murmur2":
					// The producers switched partitioner with the config.
					p = int32(partition.FNV1aPartition([]byte(id), partitions))
					q = int32(partition.Murmur2Partition([]byte(id), partitions))
				}
				first = append(first, &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"status":"paid","msg":1}`, id)})
				replays = append(replays, &kgo.Record{Topic: e.raw, Partition: q, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"status":"paid","msg":2}`, id)})
			}
			cfg := e.config("0, 1, 2, 3")
			tc.before(cfg)
			e.produce(first)
			r1 := e.start(cfg)
			waitStaged(t, r1, keys)
			e.stop(r1)

			cfg2 := e.config("0, 1, 2, 3")
			tc.after(cfg2)
			if tc.emptyDisks {
				cfg2.State.Dir += "-new"
			}
			e.produce(replays)
			r2 := e.start(cfg2)
			if !tc.refused {
				waitStaged(t, r2, keys)
				e.stop(r2)
				if repeats, total := countRepeats(t, e, partitions); repeats != 0 || total != keys {
					t.Errorf("%d repeats in %d output records, want 0 in %d", repeats, total, keys)
				}
				return
			}
			select {
			case err := <-r2.done:
				r2.done <- err // for the cleanup
				if !errors.Is(err, job.ErrTopics) || !strings.Contains(err.Error(), "migrate") {
					t.Fatalf("start under a changed route: err %v, want an ErrTopics refusal naming migrate", err)
				}
			case <-time.After(30 * time.Second):
				waitStaged(t, r2, keys)
				e.stop(r2)
				repeats, total := countRepeats(t, e, partitions)
				t.Fatalf("the job ran under a changed route: %d repeats in %d output records", repeats, total)
			}
			if _, err := job.Migrate(e.ctx(60*time.Second), cfg2, job.Options{}); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			r3 := e.start(cfg2)
			waitStaged(t, r3, keys)
			e.stop(r3)
			if repeats, total := countRepeats(t, e, partitions); repeats != 0 || total != keys {
				t.Errorf("%d repeats in %d output records, want 0 in %d", repeats, total, keys)
			}
		})
	}
}

// waitStaged waits until r's stages decided at least n records in
// committed cycles and, in repartition mode, every routed record, with
// nothing new routed for a second.
func waitStaged(t *testing.T, r *running, n uint64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last job.Stats
	for {
		st := r.job.Stats()
		if st.In >= n && (st.RouteIn == 0 || st.In == st.Routed) && st == last {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stages decided %d of %d records after 60s (stats %+v)", st.In, n, st)
		}
		last = st
		time.Sleep(time.Second)
	}
}

// TestRouteChangeAfterOffsetsExpire: the producers and input.partitioner
// go from fnv1a to murmur2 while the job is stopped long enough for its
// group's offsets to expire; migrate then finds no committed offset, so the
// stores it builds have no input position and the stages read the raw
// partitions again from the start, where the records still lie on their
// fnv1a partitions. Each key must be remembered there too, not only on its
// murmur2 partition: the output read back with kgo holds each key once.
func TestRouteChangeAfterOffsetsExpire(t *testing.T) {
	e := newEnv(t)
	const keys = 2_000
	var first []*kgo.Record
	for i := range keys {
		id := fmt.Sprintf("x-%d", i)
		first = append(first, &kgo.Record{Topic: e.raw, Partition: int32(partition.FNV1aPartition([]byte(id), partitions)),
			Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"msg":1}`, id)})
	}
	cfg := e.config("0, 1, 2, 3")
	cfg.Input.Partitioner = "fnv1a"
	e.produce(first)
	r1 := e.start(cfg)
	waitStaged(t, r1, keys)
	e.stop(r1)

	deleteGroup(t, e, e.jobID)
	cfg2 := e.config("0, 1, 2, 3")
	ms, err := job.Migrate(e.ctx(120*time.Second), cfg2, job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	t.Logf("migrate: %+v", ms)
	r2 := e.start(cfg2)
	waitStaged(t, r2, keys)
	e.stop(r2)
	if repeats, total := countRepeats(t, e, partitions); repeats != 0 || total != keys {
		t.Errorf("%d repeats in %d output records, want 0 in %d: the input read again from the start passed keys migrate kept only on their new partition", repeats, total, keys)
	}
}

// TestRouteChangeWithBacklog: the producers and input.partitioner go from
// fnv1a to murmur2 while the job is stopped with input it has not read
// yet, still on its fnv1a partitions; then migrate, and replays of those
// keys arrive on their murmur2 partitions. The stage of a key's fnv1a
// partition emits it from the backlog, and its replay reaches the stage
// of its murmur2 partition: the output read back with kgo must hold each
// key once (TestPartitionCountChangeWithBacklog for a changed route).
func TestRouteChangeWithBacklog(t *testing.T) {
	e := newEnv(t)
	const keys = 2_000
	var first, replays []*kgo.Record
	for i := range keys {
		id := fmt.Sprintf("b-%d", i)
		first = append(first, &kgo.Record{Topic: e.raw, Partition: int32(partition.FNV1aPartition([]byte(id), partitions)),
			Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"msg":1}`, id)})
		if i >= keys/2 {
			replays = append(replays, &kgo.Record{Topic: e.raw, Partition: int32(partition.Murmur2Partition([]byte(id), partitions)),
				Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"msg":2}`, id)})
		}
	}
	cfg := e.config("0, 1, 2, 3")
	cfg.Input.Partitioner = "fnv1a"
	e.produce(first[:keys/2])
	e.runToEnd(cfg)
	e.produce(first[keys/2:]) // the backlog

	cfg2 := e.config("0, 1, 2, 3")
	ms, err := job.Migrate(e.ctx(120*time.Second), cfg2, job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	t.Logf("migrate: %+v", ms)
	e.produce(replays)
	e.runToEnd(cfg2)
	if repeats, total := countRepeats(t, e, partitions); repeats != 0 || total != keys {
		t.Errorf("%d repeats in %d output records, want 0 in %d", repeats, total, keys)
	}
}
