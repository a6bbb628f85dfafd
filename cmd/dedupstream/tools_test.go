package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// summaryValue reads "  name   N" from a verify summary.
func summaryValue(t *testing.T, out, name string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(name) + `\s+(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("summary lacks %q:\n%s", name, out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestVerify plants repeats in a topic, among them one across partitions
// and one inside an aborted transaction (which read_committed must not
// see), and checks the audit's counts and example offsets against what
// the producer was told.
func TestVerify(t *testing.T) {
	c := kafkatest.NewCluster(t, kfake.SeedTopics(3, "audit"), kfake.SeedTopics(1, "timed"))
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	rec := func(topic string, p int32, id string) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: p, Key: []byte("msg-" + id), Value: fmt.Appendf(nil, `{"order":{"id":%q}}`, id)}
	}
	var recs []*kgo.Record
	for i := range 300 {
		recs = append(recs, rec("audit", int32(i%3), "k-"+strconv.Itoa(i)))
	}
	recs = append(recs, &kgo.Record{Topic: "audit", Partition: 1, Value: []byte("no id here")})
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// An aborted transaction repeating k-9: invisible to read_committed.
	tx := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("verify-test"))
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, rec("audit", 0, "k-9")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}

	base := []string{"verify", "--brokers", brokers[0], "--topic", "audit", "--key", "json:order.id"}
	code, out, errOut := runCLI(t, base...)
	if code != exitOK || !strings.Contains(out, "PASS") || summaryValue(t, out, "records") != 301 ||
		summaryValue(t, out, "distinct keys") != 300 || summaryValue(t, out, "without a key") != 1 {
		t.Fatalf("clean topic: exit %d\n%s%s", code, out, errOut)
	}

	// Plant: k-5 (on partition 2) again on partition 0, k-7 (partition 1)
	// twice more on partition 1.
	planted := []*kgo.Record{rec("audit", 0, "k-5"), rec("audit", 1, "k-7"), rec("audit", 1, "k-7")}
	if err := cl.ProduceSync(ctx, planted...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	first5, first7 := recs[5], recs[7]
	code, out, errOut = runCLI(t, base...)
	if code != exitFailure || summaryValue(t, out, "repeated keys") != 2 || summaryValue(t, out, "repeat records") != 3 ||
		summaryValue(t, out, "distinct keys") != 300 || !strings.Contains(out, "FAIL: 2 business keys repeated") {
		t.Fatalf("planted repeats: exit %d\n%s%s", code, out, errOut)
	}
	// Every occurrence of each example, with its partition and offset, in
	// read order (partition 0 first).
	for _, want := range []string{
		fmt.Sprintf("key \"k-5\":\n    partition %d offset %d at ", planted[0].Partition, planted[0].Offset),
		fmt.Sprintf("    partition %d offset %d at ", first5.Partition, first5.Offset),
		fmt.Sprintf("key \"k-7\":\n    partition %d offset %d at ", first7.Partition, first7.Offset),
		fmt.Sprintf("    partition %d offset %d at ", planted[2].Partition, planted[2].Offset),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `key "k-9"`) {
		t.Errorf("the aborted repeat of k-9 was counted:\n%s", out)
	}
	// Only partition 2: k-5's repeat is on partition 0, k-7 elsewhere.
	if code, out, _ := runCLI(t, append(base, "--partitions", "2")...); code != exitOK || summaryValue(t, out, "records") != 100 {
		t.Errorf("--partitions 2: exit %d\n%s", code, out)
	}
	// --examples 0: counted, not shown.
	if code, out, _ := runCLI(t, append(base, "--examples", "0")...); code != exitFailure || strings.Contains(out, "key \"") {
		t.Errorf("--examples 0: exit %d\n%s", code, out)
	}

	// Record time against the window: two occurrences 2h apart.
	t0 := time.Now().Add(-3 * time.Hour).Truncate(time.Millisecond)
	timed := []*kgo.Record{
		{Topic: "timed", Key: []byte("a"), Timestamp: t0},
		{Topic: "timed", Key: []byte("a"), Timestamp: t0.Add(2 * time.Hour)},
		{Topic: "timed", Key: []byte("b"), Timestamp: t0.Add(2*time.Hour + time.Minute)},
	}
	if err := cl.ProduceSync(ctx, timed...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		window string
		code   int
	}{{"1h", exitOK}, {"3h", exitFailure}, {"0", exitFailure}} {
		code, out, errOut := runCLI(t, "verify", "--brokers", brokers[0], "--topic", "timed", "--window", tc.window)
		if code != tc.code {
			t.Errorf("--window %s: exit %d, want %d\n%s%s", tc.window, code, tc.code, out, errOut)
		}
	}

	// Usage errors exit 2.
	for _, args := range [][]string{
		{"verify", "--topic", "audit"},
		{"verify", "--brokers", brokers[0], "--topic", "audit", "--key", "jsn:x"},
		{"verify", "--brokers", brokers[0], "--topic", "nosuch"},
		{"verify", "--brokers", brokers[0], "--topic", "audit", "--partitions", "7"},
	} {
		if code, _, errOut := runCLI(t, args...); code != exitUsage || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// httpStatus returns the status and body of a GET.
func httpStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestOperatorTools runs the job on the embedded broker and then: inspect
// shows the keys of the run per partition and finds single keys; /readyz
// answers 503 while a stage restores and 200 after; inspect refuses the
// locked state of the running job; verify passes the output and finds the
// raw topic's duplicates.
func TestOperatorTools(t *testing.T) {
	const parts = 4
	c := kafkatest.NewCluster(t, kfake.SeedTopics(parts, "orders-raw", "orders"), kfake.SeedTopics(1, "orders-dlq"))
	brokers := c.ListenAddrs()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "job.yaml")
	os.WriteFile(cfgPath, fmt.Appendf(nil, `job: {id: tools}
kafka: {brokers: [%q]}
input: {topics: [orders-raw]}
output: {topic: orders}
assignment: {partitions: [0, 1, 2, 3]}
dedup: {key: ["json:order_id"], expected_keys: 20000}
state: {dir: %s, memory: 64MiB, memtable_size: 1MiB}
commit: {interval: 30ms}
`, brokers[0], filepath.Join(dir, "state")), 0o644)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	w := jobtest.New(jobtest.Spec{Topic: "orders-raw", Partitions: parts, Keys: 3_000, Replay: 500, Seed: 9})
	prod, err := jobtest.NewProducer(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := prod.Produce(ctx, w.Records); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	start := func(opts job.Options) (*job.Job, string, func()) {
		opts.Logger = log
		j, err := job.New(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		addr, stopServe, err := serveMetrics("127.0.0.1:0", j, log)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stopRun := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- j.Run(runCtx) }()
		return j, "http://" + addr, func() {
			stopRun()
			if err := <-done; err != nil {
				t.Errorf("job: %v", err)
			}
			stopServe()
		}
	}
	caught := func() {
		for {
			ok, _, err := prod.Caught(ctx, cfg.Job.ID, "orders-raw", parts, 1)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	j, url, stop := start(job.Options{})
	caught()
	if code, _ := httpStatus(t, url+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d while every stage runs", code)
	}
	stop()

	// inspect: exact keys per partition, as the workload predicts.
	wantKeys := make([]int, parts)
	for k := range w.First {
		wantKeys[partition.Murmur2Partition([]byte(k), parts)]++
	}
	code, out, errOut := runCLI(t, "inspect", "--config", cfgPath)
	if code != exitOK {
		t.Fatalf("inspect: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("inspect:\n%s", out)
	got := regexp.MustCompile(`(?m)^  keys: (\d+)$`).FindAllStringSubmatch(out, -1)
	if len(got) != parts {
		t.Fatalf("inspect shows %d partitions:\n%s", len(got), out)
	}
	for p, m := range got {
		if n, _ := strconv.Atoi(m[1]); n != wantKeys[p] {
			t.Errorf("inspect: partition %d holds %d keys, the workload has %d", p, n, wantKeys[p])
		}
	}
	if !strings.Contains(out, fmt.Sprintf("total: %d keys in 4 partitions", len(w.First))) ||
		!strings.Contains(out, "bloom: snapshot of 5 generations") || !strings.Contains(out, "checkpoint: next output offset") ||
		!strings.Contains(out, "generation marks (generation@output offset, generations of ") {
		t.Errorf("inspect output:\n%s", out)
	}
	p5 := partition.Murmur2Partition([]byte("o-5"), parts)
	code, out, _ = runCLI(t, "inspect", "--state", cfg.State.Dir, "key", "o-5")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf(`key "o-5": present in partition %d, generation `, p5)) {
		t.Errorf("inspect key o-5: exit %d\n%s", code, out)
	}
	if code, out, _ := runCLI(t, "inspect", "--state", cfg.State.Dir, "key", "o-999999"); code != exitFailure || !strings.Contains(out, "not present") {
		t.Errorf("inspect key o-999999: exit %d\n%s", code, out)
	}
	st1 := j.Stats()

	// A restart without partition 1's state: not ready while it restores.
	if err := os.RemoveAll(job.StateDir(cfg.State.Dir, 1)); err != nil {
		t.Fatal(err)
	}
	hold, release := make(chan struct{}), make(chan struct{})
	var o2 job.Options
	testhook.Set(&o2, testhook.Hooks{Failpoint: func(name string) {
		if name == testhook.Restored {
			select {
			case hold <- struct{}{}:
				<-release
			default:
			}
		}
	}})
	j2, url, stop2 := start(o2)
	<-hold
	for deadline := time.Now().Add(30 * time.Second); j2.Stats().Ready < parts-1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the partitions without a restore did not get ready")
		}
	}
	if code, body := httpStatus(t, url+"/readyz"); code != http.StatusServiceUnavailable || j2.Ready() {
		t.Errorf("/readyz %d %q while partition 1 restores", code, body)
	}
	if code, _ := httpStatus(t, url+"/livez"); code != http.StatusOK {
		t.Errorf("/livez %d", code)
	}
	if code, body := httpStatus(t, url+"/metrics"); code != http.StatusOK || !strings.Contains(body, "dedupstream_build_info{") ||
		!strings.Contains(body, `dedupstream_ready_stages 3`) {
		t.Errorf("/metrics %d while restoring:\n%.2000s", code, body)
	}
	// The running job holds its stores.
	if code, _, errOut := runCLI(t, "inspect", "--config", cfgPath, "--partitions", "0"); code != exitFailure || !strings.Contains(errOut, "is open in another process") {
		t.Errorf("inspect of a running job: exit %d, stderr %q", code, errOut)
	}
	close(release)
	for deadline := time.Now().Add(30 * time.Second); !j2.Ready(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not ready 30s after the restore was released")
		}
	}
	if code, _ := httpStatus(t, url+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d after the restore", code)
	}
	_, body := httpStatus(t, url+"/metrics")
	if want := fmt.Sprintf(`dedupstream_restored_records_total{partition="1"} %d`, st1.Emitted-countOn(w, 0, 2, 3)); !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %q", want)
	}
	stop2()

	// verify: the output holds every key once; the raw topic does not.
	code, out, errOut = runCLI(t, "verify", "--config", cfgPath)
	if code != exitOK || summaryValue(t, out, "distinct keys") != len(w.First) || summaryValue(t, out, "records") != len(w.First) {
		t.Errorf("verify of the output: exit %d\n%s%s", code, out, errOut)
	}
	occurrences := map[string]int{}
	for _, r := range w.Records {
		if !strings.HasPrefix(string(r.Key), "bad-") {
			occurrences[string(r.Key)]++
		}
	}
	repeated := 0
	for _, n := range occurrences {
		if n > 1 {
			repeated++
		}
	}
	code, out, _ = runCLI(t, "verify", "--config", cfgPath, "--topic", "orders-raw")
	if code != exitFailure || summaryValue(t, out, "repeated keys") != repeated || summaryValue(t, out, "without a key") != w.Poison ||
		summaryValue(t, out, "repeat records") != len(w.Records)-w.Poison-len(w.First) {
		t.Errorf("verify of the raw topic: exit %d, want %d repeated keys, %d without a key\n%s", code, repeated, w.Poison, out)
	}
}

// countOn counts the distinct keys of w on the given partitions.
func countOn(w *jobtest.Workload, parts ...int) uint64 {
	var n uint64
	for k := range w.First {
		if slices.Contains(parts, partition.Murmur2Partition([]byte(k), w.Spec.Partitions)) {
			n++
		}
	}
	return n
}
