package job_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// growTopics adds partitions to topics up to n.
func growTopics(t *testing.T, e *env, n int32, topics ...string) {
	t.Helper()
	req := kmsg.NewPtrCreatePartitionsRequest()
	for _, topic := range topics {
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = topic, n
		req.Topics = append(req.Topics, rt)
	}
	req.TimeoutMillis = 30_000
	res, err := req.RequestWith(e.ctx(30*time.Second), kafkatest.NewClient(t, e.brokers, e.clientOpts...))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Topics {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("grow %s to %d partitions: %v", r.Topic, n, err)
		}
	}
	// Wait until every broker's metadata shows the new count: a producer
	// asking a broker that lags would still see the old one.
	if err := kafkatest.WaitTopics(e.ctx(60*time.Second), kafkatest.NewClient(t, e.brokers, e.clientOpts...), n, topics...); err != nil {
		t.Fatalf("grow to %d partitions: %v", n, err)
	}
}

// growWorkload is keys produced under 4 partitions, then replays of a third
// of them (new message ids) routed under 6, as producers do once the topic
// has grown: about two thirds of the keys move partitions.
func growWorkload(e *env, keys int) (w *jobtest.Workload, before, after []*kgo.Record) {
	w = &jobtest.Workload{Spec: jobtest.Spec{Topic: e.raw, Partitions: 6}, First: map[string][]byte{}, Unordered: false}
	for i := range keys {
		id := fmt.Sprintf("g-%d", i)
		v := fmt.Appendf(nil, `{"order_id":%q,"msg_id":"first"}`, id)
		w.First[id] = v
		before = append(before, &kgo.Record{Topic: e.raw, Key: []byte(id), Value: v, Partition: int32(partition.Murmur2Partition([]byte(id), 4))})
		if i%3 == 0 {
			after = append(after, &kgo.Record{Topic: e.raw, Key: []byte(id), Partition: int32(partition.Murmur2Partition([]byte(id), 6)),
				Value: fmt.Appendf(nil, `{"order_id":%q,"msg_id":"replay"}`, id)})
		}
	}
	w.Records = append(append([]*kgo.Record{}, before...), after...)
	return w, before, after
}

// growAndReplay grows the raw and output topics to 6 partitions, then
// produces after to them to them; the producer
// knows what it wrote (for waitReplays).
func growAndReplay(t *testing.T, e *env, after []*kgo.Record) *jobtest.Producer {
	t.Helper()
	growTopics(t, e, 6, e.raw, e.out)
	p6, err := jobtest.NewProducer(e.brokers, e.clientOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p6.Close)
	if err := p6.Produce(e.ctx(30*time.Second), after); err != nil {
		t.Fatal(err)
	}
	return p6
}

// waitReplays waits until the job committed everything p6 produced to the
// raw topic's 6 partitions.
func waitReplays(t *testing.T, e *env, p6 *jobtest.Producer) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		ok, c, err := p6.Caught(e.ctx(10*time.Second), e.jobID, e.raw, 6, 1)
		if err != nil && !kerr.IsRetriable(err) {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job did not commit the replays: committed %v of %v", c, p6.End[e.raw])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countRepeats reads the output read_committed with kgo and returns how
// many records repeat a key already in it.
func countRepeats(t *testing.T, e *env, partitions int) (repeats, total int) {
	t.Helper()
	out, err := jobtest.ReadCommitted(e.ctx(60*time.Second), e.brokers, e.out, partitions, e.clientOpts...)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range out {
		if seen[string(r.Key)] {
			repeats++
		}
		seen[string(r.Key)] = true
	}
	return repeats, len(out)
}

// TestPartitionCountChange: raw and output topics grown from 4 to 6
// partitions under the same job id. Starting the job as before must be
// refused (ErrPartitionCount, so exit 2) in both the group offsets' and the
// store's view; after job.Migrate, replays of the old keys, now on other
// partitions, must all be dropped (checked with kgo).
func TestPartitionCountChange(t *testing.T) {
	e := newEnv(t)
	w, before, after := growWorkload(e, 5_000)
	cfg := e.config("0, 1, 2, 3")
	e.produce(before)
	e.runToEnd(cfg)

	p6 := growAndReplay(t, e, after)
	cfg6 := e.config("0, 1, 2, 3, 4, 5")
	refused := func(what string) {
		t.Helper()
		r := e.start(cfg6)
		err := r.wait(t, 60*time.Second)
		if !errors.Is(err, job.ErrPartitionCount) || !errors.Is(err, job.ErrTopics) || !strings.Contains(err.Error(), "dedupstream migrate") {
			t.Fatalf("%s: want ErrPartitionCount naming dedupstream migrate, got %v", what, err)
		}
		t.Logf("%s: refused with: %v", what, err)
	}
	refused("offsets record 4 partitions")

	// The stores record N too: with the offsets' record gone (another
	// group, as if the offsets expired), the state still refuses.
	cfgOther := e.config("0, 1, 2, 3, 4, 5")
	cfgOther.Job.ID += "-other"
	cfgOther.State.Dir = cfg6.State.Dir
	var ms job.MigrateStats
	var err error
	r := e.start(cfgOther)
	if err := r.wait(t, 60*time.Second); !errors.Is(err, job.ErrPartitionCount) || !strings.Contains(err.Error(), cfg6.State.Dir) {
		t.Fatalf("store built for 4 partitions: want ErrPartitionCount naming the state directory, got %v", err)
	}
	// No stage may start its recovery (and then emit) before every store
	// of the start was checked: the stores of partitions 4 and 5 are new
	// and pass, and would read the replays as new keys.
	if n := r.job.Stats().Recoveries; n != 0 {
		t.Errorf("the refused start ran %d recoveries: stages went on before every store was checked", n)
	}

	ms, err = job.Migrate(e.ctx(120*time.Second), cfg6, job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("migrate: %+v", ms)
	if ms.From != 4 || ms.To != 6 || len(ms.Partitions) != 6 || ms.Restored != uint64(len(before)) {
		t.Errorf("migrate: %+v; want from 4 to 6, 6 partitions, %d keys restored", ms, len(before))
	}
	r2 := e.start(cfg6)
	waitReplays(t, e, p6)
	e.stop(r2)
	repeats, total := countRepeats(t, e, 6)
	if repeats != 0 || total != len(before) {
		t.Errorf("after the migration: %d repeats in %d output records, want 0 in %d", repeats, total, len(before))
	}
	if st := r2.job.Stats(); st.DroppedHistory != uint64(len(after)) {
		t.Errorf("dropped %d replays, want all %d", st.DroppedHistory, len(after))
	}
	_ = w
}

// deleteGroup deletes the job's consumer group and its committed offsets,
// as the brokers do once an empty group outlives offsets.retention.minutes.
func deleteGroup(t *testing.T, e *env, group string) {
	t.Helper()
	req := kmsg.NewPtrDeleteGroupsRequest()
	req.Groups = []string{group}
	res, err := req.RequestWith(e.ctx(30*time.Second), kafkatest.NewClient(t, e.brokers, e.clientOpts...))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range res.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			t.Fatalf("delete group %s: %v", g.Group, err)
		}
	}
}

// TestPartitionCountChangeAfterOffsetsExpire: the topics grown from 4 to 6
// partitions while the job was stopped long enough for its group's offsets
// to expire, then started on empty disks. Neither the offsets nor a store
// remember 4; the partitions topic does, so the start is refused before
// anything is emitted (kgo finds no repeat), Migrate takes 4 from it, and
// after the migration every replay is dropped.
func TestPartitionCountChangeAfterOffsetsExpire(t *testing.T) {
	e := newEnv(t)
	_, before, after := growWorkload(e, 3_000)
	e.produce(before)
	e.runToEnd(e.config("0, 1, 2, 3"))

	p6 := growAndReplay(t, e, after)
	deleteGroup(t, e, e.jobID)
	cfg6 := e.config("0, 1, 2, 3, 4, 5")
	cfg6.State.Dir = t.TempDir() // a new instance's empty disk

	r := e.start(cfg6)
	err := r.wait(t, 60*time.Second)
	if !errors.Is(err, job.ErrPartitionCount) || !strings.Contains(err.Error(), job.PartitionsTopic(e.jobID)) || !strings.Contains(err.Error(), "dedupstream migrate") {
		t.Fatalf("want ErrPartitionCount naming the partitions topic and dedupstream migrate, got %v", err)
	}
	t.Logf("refused with: %v", err)
	if n := r.job.Stats().Recoveries; n != 0 {
		t.Errorf("the refused start ran %d recoveries", n)
	}

	ms, err := job.Migrate(e.ctx(120*time.Second), cfg6, job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ms.From != 4 || ms.To != 6 || ms.Restored != uint64(len(before)) {
		t.Errorf("migrate: %+v; want from 4 (the partitions topic) to 6, %d keys restored", ms, len(before))
	}
	r2 := e.start(cfg6)
	waitReplays(t, e, p6)
	e.stop(r2)
	// Read last: the reader appends sentinels to the output. A replay
	// emitted by the refused start would be a repeat here too.
	if repeats, total := countRepeats(t, e, 6); repeats != 0 || total != len(before) {
		t.Errorf("after the migration: %d repeats in %d output records, want 0 in %d", repeats, total, len(before))
	}
}

// TestPartitionCountChangeWithBacklog: the job is stopped with input it has
// not read yet (producers go on while it is stopped, or it lagged), routed
// under 4 partitions; the topics grow to 6 and replays of a third of the
// keys arrive routed under 6, then migrate and the job runs. A key of the
// backlog is first emitted by the stage of its old partition, its replay
// reaches the stage of its new one: every replay must still be dropped
// (read back with kgo).
func TestPartitionCountChangeWithBacklog(t *testing.T) {
	e := newEnv(t)
	_, before, after := growWorkload(e, 3_000)
	half := len(before) / 2
	e.produce(before[:half])
	cfg := e.config("0, 1, 2, 3")
	e.runToEnd(cfg)
	// The backlog: routed under 4, not read yet. One more key's only
	// record there is too large: the stage dead-letters it, so the key's
	// first valid record, later and routed under 6, must be emitted.
	big := ""
	for i := 0; big == ""; i++ {
		if id := fmt.Sprintf("big-%d", i); partition.Murmur2Partition([]byte(id), 4) != partition.Murmur2Partition([]byte(id), 6) {
			big = id
		}
	}
	e.produce(append(slices.Clone(before[half:]), &kgo.Record{Topic: e.raw, Key: []byte(big), Partition: int32(partition.Murmur2Partition([]byte(big), 4)),
		Value: fmt.Appendf(nil, `{"order_id":%q,"pad":%q}`, big, strings.Repeat("x", 4096))}))

	p6 := growAndReplay(t, e, after)
	cfg6 := e.config("0, 1, 2, 3, 4, 5")
	cfg6.Dedup.MaxRecordBytes = 2048
	ms, err := job.Migrate(e.ctx(120*time.Second), cfg6, job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("migrate: %+v", ms)
	if err := p6.Produce(e.ctx(30*time.Second), []*kgo.Record{{Topic: e.raw, Key: []byte(big), Partition: int32(partition.Murmur2Partition([]byte(big), 6)),
		Value: fmt.Appendf(nil, `{"order_id":%q}`, big)}}); err != nil {
		t.Fatal(err)
	}
	r2 := e.start(cfg6)
	waitReplays(t, e, p6)
	e.waitCommitted(r2, 1, 60*time.Second)
	e.stop(r2)
	if repeats, total := countRepeats(t, e, 6); repeats != 0 || total != len(before)+1 {
		t.Errorf("after the migration with a backlog: %d repeats in %d output records, want 0 in %d", repeats, total, len(before)+1)
	}
}

// TestMigrateOnEveryInstance: in group mode migrate runs on every instance
// whose state directory will be used, so only the first run finds the old
// count recorded; the second finds the new one. The topics grew from 4 to
// 6 while the job stood still long enough for the group's offsets to
// expire, and both instances migrated: the second instance's stages read
// the raw partitions again from the start, where every record still lies
// where the old count put it, and each must be dropped, as after the first
// instance's migrate (read back with kgo).
func TestMigrateOnEveryInstance(t *testing.T) {
	e := newEnv(t)
	_, before, _ := growWorkload(e, 3_000)
	e.produce(before)
	e.runToEnd(e.config("0, 1, 2, 3"))

	growTopics(t, e, 6, e.raw, e.out)
	deleteGroup(t, e, e.jobID)
	cfg6 := e.config("0, 1, 2, 3, 4, 5")
	cfg6.Assignment.Mode = "group"
	opts := job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second}
	first, err := job.Migrate(e.ctx(120*time.Second), cfg6, opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg6.State.Dir = t.TempDir() // the second instance's disk
	second, err := job.Migrate(e.ctx(120*time.Second), cfg6, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first migrate: %+v; second: %+v", first, second)

	cfg6.Assignment.Mode = "static" // the second instance's stores, all six
	e.runToEnd(cfg6)
	if repeats, total := countRepeats(t, e, 6); repeats != 0 || total != len(before) {
		t.Errorf("input read again after the second instance's migrate: %d repeats in %d output records, want 0 in %d", repeats, total, len(before))
	}
}

// TestEmptyDiskAfterPartitionCountChange: after the topics grew from 4 to 6
// and migrate ran, an instance starts with an empty disk within the window
// (a disk lost, a new instance, a group member that never ran migrate).
// Its new stores must learn the keys that moved to their partitions from
// the other output partitions: replays of the old keys on their new
// partitions must all be dropped (read back with kgo).
func TestEmptyDiskAfterPartitionCountChange(t *testing.T) {
	e, before, after, cfg6 := migratedTo6(t)
	replayOnEmptyDisk(t, e, cfg6, before, after, "an empty disk after the migration")
}

// migratedTo6 runs a job under 4 partitions over the first records of a
// 3000-key workload, grows the raw and output topics to 6 and runs
// migrate; it returns the environment, those records, the workload's
// replays of their keys (not produced) and the config under 6.
func migratedTo6(t *testing.T) (e *env, before, after []*kgo.Record, cfg6 *config.Config) {
	t.Helper()
	e = newEnv(t)
	_, before, after = growWorkload(e, 3_000)
	e.produce(before)
	e.runToEnd(e.config("0, 1, 2, 3"))
	growTopics(t, e, 6, e.raw, e.out)
	cfg6 = e.config("0, 1, 2, 3, 4, 5")
	if _, err := job.Migrate(e.ctx(120*time.Second), cfg6, job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	return e, before, after, cfg6
}

// replayOnEmptyDisk runs cfg6 (6 partitions) on an empty state directory
// over after, replays of keys of before produced now, until the job read
// them, and checks that the output holds before's keys once each and
// nothing more; what names the case.
func replayOnEmptyDisk(t *testing.T, e *env, cfg6 *config.Config, before, after []*kgo.Record, what string) {
	t.Helper()
	cfg6.State.Dir = t.TempDir() // the empty disk
	p6, err := jobtest.NewProducer(e.brokers, e.clientOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p6.Close)
	if err := p6.Produce(e.ctx(30*time.Second), after); err != nil {
		t.Fatal(err)
	}
	r := e.start(cfg6)
	waitReplays(t, e, p6)
	e.stop(r)
	if repeats, total := countRepeats(t, e, 6); repeats != 0 || total != len(before) {
		t.Errorf("%s: %d repeats in %d output records, want 0 in %d", what, repeats, total, len(before))
	}
}
