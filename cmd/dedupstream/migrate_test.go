package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// adminRequest sends req with an independent kgo client and fails the test
// on a request error; check returns the answer's first error code.
func adminRequest[R kmsg.Response](t *testing.T, brokers []string, req kmsg.Request, check func(R) int16) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := kafkatest.NewClient(t, brokers).Request(ctx, req)
	if err == nil {
		err = kerr.ErrorForCode(check(res.(R)))
	}
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
}

// growTopic adds partitions to topic up to n, as kafka-topics --alter
// --partitions does.
func growTopic(t *testing.T, brokers []string, topic string, n int32) {
	t.Helper()
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, n
	req.Topics, req.TimeoutMillis = append(req.Topics, rt), 30_000
	adminRequest(t, brokers, req, func(r *kmsg.CreatePartitionsResponse) int16 { return r.Topics[0].ErrorCode })
}

// setTopicConfig sets one config of topic, as kafka-configs --alter
// --add-config does.
func setTopicConfig(t *testing.T, brokers []string, topic, name, value string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = name, kmsg.StringPtr(value)
	rr.Configs = append(rr.Configs, c)
	req.Resources = append(req.Resources, rr)
	adminRequest(t, brokers, req, func(r *kmsg.IncrementalAlterConfigsResponse) int16 { return r.Resources[0].ErrorCode })
}

// movingKey returns the first key with prefix whose murmur2 partition
// differs under 4 and 6 partitions.
func movingKey(prefix string) string {
	for i := 0; ; i++ {
		if k := prefix + strconv.Itoa(i); partition.Murmur2Partition([]byte(k), 4) != partition.Murmur2Partition([]byte(k), 6) {
			return k
		}
	}
}

// TestMigrateCommand runs "dedupstream migrate" after an operator grew the
// topics from 4 to 6 partitions. It refuses with exit 2, one line per
// problem, while only the raw topic has grown, and while the partitions
// topic may lose its records to retention; each refusal leaves the state
// as it was. Then, run on each of two static instances, it exits 0 and
// prints the summary, whose counts follow from the data (see wantSummary).
// The job then runs under 6 and kgo finds every key once in the output
// and both poison records in the DLQ.
func TestMigrateCommand(t *testing.T) {
	c := kafkatest.NewCluster(t, kfake.SeedTopics(4, "orders-raw", "orders"), kfake.SeedTopics(1, "orders-dlq"))
	brokers := c.ListenAddrs()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	writeConfig := func(name, parts string) string {
		path := filepath.Join(dir, name)
		os.WriteFile(path, fmt.Appendf(nil, `job: {id: grow}
kafka: {brokers: [%q]}
input: {topics: [orders-raw]}
output: {topic: orders}
assignment: {partitions: [%s]}
dedup: {key: ["json:order_id"], expected_keys: 20000}
state: {dir: %s, memory: 64MiB, memtable_size: 1MiB}
commit: {interval: 30ms}
log: {level: error}
`, brokers[0], parts, state), 0o644)
		return path
	}
	cfg4, cfg6 := writeConfig("job4.yaml", "0, 1, 2, 3"), writeConfig("job6.yaml", "0, 1, 2, 3, 4, 5")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prod, err := jobtest.NewProducer(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	record := func(id string, parts int, msg string) *kgo.Record {
		return &kgo.Record{Topic: "orders-raw", Key: []byte(id), Partition: int32(partition.Murmur2Partition([]byte(id), parts)),
			Value: fmt.Appendf(nil, `{"order_id":%q,"msg":%q}`, id, msg)}
	}
	poison := func(id string) *kgo.Record {
		return &kgo.Record{Topic: "orders-raw", Key: []byte(id), Partition: int32(partition.Murmur2Partition([]byte(id), 4)), Value: []byte(jobtest.PoisonNotJSON)}
	}
	produce := func(prod *jobtest.Producer, recs []*kgo.Record) {
		t.Helper()
		if err := prod.Produce(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	// runToEnd runs the job on the config at path until it committed all
	// that prods produced.
	runToEnd := func(path string, parts int, prods ...*jobtest.Producer) {
		t.Helper()
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		j, err := job.New(cfg, job.Options{Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- j.Run(runCtx) }()
		for {
			caught := true
			for _, prod := range prods {
				ok, _, err := prod.Caught(ctx, "grow", "orders-raw", parts, 1)
				if err != nil && !kerr.IsRetriable(err) {
					t.Fatal(err)
				}
				caught = caught && ok
			}
			if caught {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("job under %d partitions exited early: %v", parts, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("job under %d partitions: %v", parts, err)
		}
	}

	// Run under 4: 2000 keys, every fifth sent twice, one poison record.
	const keys, backlogKeys = 2000, 600
	var first []*kgo.Record
	for i := range keys {
		first = append(first, record("o-"+strconv.Itoa(i), 4, "first"))
		if i%5 == 0 {
			first = append(first, record("o-"+strconv.Itoa(i), 4, "retry"))
		}
	}
	produce(prod, append(first, poison(movingKey("bad-a-"))))
	runToEnd(cfg4, 4, prod)

	// The backlog, unread when the topics grow: new keys and replays of
	// old ones routed under 4, and a poison record (never emitted, so not
	// inserted) whose Kafka key moves.
	var backlog []*kgo.Record
	for i := range backlogKeys {
		backlog = append(backlog, record("n-"+strconv.Itoa(i), 4, "backlog"))
	}
	for i := 0; i < keys; i += 7 {
		backlog = append(backlog, record("o-"+strconv.Itoa(i), 4, "replay"))
	}
	backlog = append(backlog, poison(movingKey("bad-b-")))
	produce(prod, backlog)
	// Static instances A and B own partitions 0-2 and 3-5 under 6 (their
	// directories share a root here, so that one job can run them all
	// afterwards). What each migrate must print follows from the data:
	// every output record is read; one is inserted when the partition its
	// key belongs to under 6 is owned, or the one it lies in (where the
	// first run emitted it under 4); a backlog record with a business key
	// counts when its key belongs under 6 to an owned partition other than
	// the one it lies in.
	owners := []struct {
		name, parts string
		owns        func(p int) bool
	}{
		{"A", "0, 1, 2", func(p int) bool { return p < 3 }},
		{"B", "3, 4, 5", func(p int) bool { return p >= 3 }},
	}
	wantSummary := func(owns func(int) bool, from int) []string {
		var inserted, moved int
		var parts []string
		for p := range 6 {
			if owns(p) {
				parts = append(parts, strconv.Itoa(p))
			}
		}
		for i := range keys {
			k := []byte("o-" + strconv.Itoa(i))
			if owns(partition.Murmur2Partition(k, 6)) || owns(partition.Murmur2Partition(k, 4)) {
				inserted++
			}
		}
		for _, r := range backlog {
			if q := partition.Murmur2Partition(r.Key, 6); string(r.Value) != jobtest.PoisonNotJSON && q != int(r.Partition) && owns(q) {
				moved++
			}
		}
		return []string{strconv.Itoa(from), "6", strings.Join(parts, " "), strconv.Itoa(keys), strconv.Itoa(inserted), strconv.Itoa(moved)}
	}
	cfgA, cfgB := writeConfig("jobA.yaml", owners[0].parts), writeConfig("jobB.yaml", owners[1].parts)

	keep := filepath.Join(job.StateDir(state, 3), "kept-by-refusals")
	if err := os.WriteFile(keep, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, want ...string) {
		t.Helper()
		code, out, errOut := runCLI(t, "migrate", "--config", cfgB)
		wantErr := cfgB + ": " + strings.Join(want, "\n") + "\n"
		if code != exitUsage || out != "" || errOut != wantErr {
			t.Errorf("migrate with %s: exit %d, want %d; stdout %q\nstderr:\n%s\nwant stderr:\n%s", what, code, exitUsage, out, errOut, wantErr)
		}
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("migrate with %s touched the state: %v", what, err)
		}
	}

	// The operator grew the raw topic only.
	growTopic(t, brokers, "orders-raw", 6)
	refused("only the raw topic grown",
		"job: topics do not fit the config:",
		`input.topics[0]: raw topic "orders-raw" has 6 partitions, output topic "orders" has 4: input mode needs one output partition per raw partition (or use partitioning: repartition)`,
		`assignment.partitions[1]: partition 4 does not exist: output topic "orders" has 4 partitions`,
		`assignment.partitions[2]: partition 5 does not exist: output topic "orders" has 4 partitions`)

	// Both grown, but someone set delete retention on the partitions topic.
	growTopic(t, brokers, "orders", 6)
	pt := job.PartitionsTopic("grow")
	setTopicConfig(t, brokers, pt, "cleanup.policy", "delete")
	refused("the partitions topic under delete retention",
		fmt.Sprintf(`job: topics do not fit the config: job.id: topic %q, where job "grow" records its partition count, route and output topic, has cleanup.policy=delete, retention.ms=604800000: `, pt)+
			"retention deletes those records, and a start after that takes a changed partition count or route for the one the job ran under, so repeats would pass. "+
			"Make it compacted: kafka-configs --bootstrap-server BROKER --alter --entity-type topics --entity-name "+pt+" --add-config cleanup.policy=compact; "+
			"if records were deleted already, the next start records the layout it is started with: check first that the topics' partition count and the route are those the job ran under (docs/scaling.md)")
	setTopicConfig(t, brokers, pt, "cleanup.policy", "compact")

	summary := regexp.MustCompile(`^migrated job "grow" (?:from (\S+) to|to) (\d+) partitions( \(already recorded: an earlier migrate or another instance's\))?: rebuilt partitions \[([0-9 ]*)\] from (\d+) output records \((\d+) inserted\) and (\d+) unread input records whose keys moved; start the instances now\n$`)
	for i, o := range owners {
		code, out, errOut := runCLI(t, "migrate", "--config", []string{cfgA, cfgB}[i])
		if code != exitOK {
			t.Fatalf("migrate on %s: exit %d\n%s%s", o.name, code, out, errOut)
		}
		t.Logf("migrate on %s: %s", o.name, out)
		m := summary.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("migrate on %s printed %q", o.name, out)
		}
		// The first migrate records 6 with the committed offsets, so the
		// second finds 6 there (MigrateStats.From) and says so.
		from := m[1]
		if m[3] != "" {
			from = m[2]
		}
		got := append([]string{from, m[2]}, m[4:]...)
		if want := wantSummary(o.owns, []int{4, 6}[i]); !slices.Equal(got, want) {
			t.Errorf("migrate on %s: summary (from, to, partitions, read, inserted, backlog) = %q, want %q", o.name, got, want)
		}
		if recorded := m[3] != ""; recorded != (i == 1) {
			t.Errorf("migrate on %s: says the count was already recorded: %t, want %t (%q)", o.name, recorded, i == 1, out)
		}
	}
	if _, err := os.Stat(keep); err == nil {
		t.Error("migrate kept the old state of partition 3")
	}

	// Under 6: the backlog, then replays of every old key routed under 6.
	var replays []*kgo.Record
	for i := range keys {
		replays = append(replays, record("o-"+strconv.Itoa(i), 6, "after"))
	}
	for i := range backlogKeys {
		replays = append(replays, record("n-"+strconv.Itoa(i), 6, "after"))
	}
	p6, err := jobtest.NewProducer(brokers) // knows the 6 partitions
	if err != nil {
		t.Fatal(err)
	}
	defer p6.Close()
	produce(p6, replays)
	runToEnd(cfg6, 6, prod, p6)
	recs, err := jobtest.ReadCommitted(ctx, brokers, "orders", 6)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range recs {
		seen[string(r.Key)]++
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("key %s is %d times in the output", k, n)
		}
	}
	if len(seen) != keys+backlogKeys || len(recs) != keys+backlogKeys {
		t.Errorf("output holds %d records of %d keys, want %d once each", len(recs), len(seen), keys+backlogKeys)
	}
	if dlq, err := jobtest.ReadCommitted(ctx, brokers, "orders-dlq", 1); err != nil || len(dlq) != 2 {
		t.Errorf("DLQ holds %d records (%v), want the 2 poison records", len(dlq), err)
	}
}
