package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job/jobtest"
)

// jobEnv is what the subprocess tests share: brokers (KAFKA_BROKERS or a
// new embedded cluster) with uniquely named topics, a workload, an
// independent producer for it, and a deadline for the whole test.
type jobEnv struct {
	t             *testing.T
	brokers       []string
	raw, out, dlq string
	group         string
	parts         int
	dir           string
	w             *jobtest.Workload
	prod          *jobtest.Producer
	ctx           context.Context
}

// newJobEnv makes raw and output topics of parts partitions, a DLQ topic of
// one, and the workload of spec on the raw topic.
func newJobEnv(t *testing.T, name string, parts int, spec jobtest.Spec, timeout time.Duration) *jobEnv {
	t.Helper()
	brokers, raw, out, dlq := jobTopics(t, int32(parts))
	spec.Topic, spec.Partitions = raw, parts
	e := &jobEnv{t: t, brokers: brokers, raw: raw, out: out, dlq: dlq, parts: parts,
		group: kafkatest.TopicName(name), dir: t.TempDir(), w: jobtest.New(spec)}
	var err error
	if e.prod, err = jobtest.NewProducer(brokers); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.prod.Close)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	e.ctx = ctx
	return e
}

// jobTopics returns the brokers of KAFKA_BROKERS or of a new embedded
// cluster, with a raw and an output topic of parts partitions and a DLQ
// topic of one, named uniquely: a real cluster keeps topics between runs.
func jobTopics(t *testing.T, parts int32) (brokers []string, raw, out, dlq string) {
	t.Helper()
	brokers = kafkatest.Brokers(t)
	raw, out, dlq = kafkatest.TopicName("raw"), kafkatest.TopicName("out"), kafkatest.TopicName("out-dlq")
	kafkatest.CreateTopics(t, brokers, parts, raw, out)
	kafkatest.CreateTopics(t, brokers, 1, dlq)
	return brokers, raw, out, dlq
}

// config writes the job file of instance name and returns its path; its
// state directory is its own. assignment and commit are YAML flow mappings.
func (e *jobEnv) config(name, assignment, commit, level string) string {
	e.t.Helper()
	path := filepath.Join(e.dir, name+".yaml")
	cfg := fmt.Sprintf(`job: {id: %s}
kafka: {brokers: [%q], transaction_timeout: 30s}
input: {topics: [%s]}
output: {topic: %s, dlq_topic: %s}
assignment: %s
dedup: {key: ["json:order_id"], expected_keys: %d}
state: {dir: %s, memory: 64MiB, memtable_size: 1MiB}
commit: %s
log: {level: %s, format: text}
metrics: {listen: "127.0.0.1:0"}
`, e.group, e.brokers[0], e.raw, e.out, e.dlq, assignment, 2*len(e.w.First), filepath.Join(e.dir, "state-"+name), commit, level)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// produce writes records of the workload, failing the test on error.
func (e *jobEnv) produce(from, to int) {
	e.t.Helper()
	if err := e.prod.Produce(e.ctx, e.w.Records[from:to]); err != nil {
		e.t.Fatal(err)
	}
}

// feed produces the whole workload in chunks of n records, pause apart, in
// the background; the channel reports the end.
func (e *jobEnv) feed(n int, pause time.Duration) <-chan error {
	fed := make(chan error, 1)
	go func() {
		for from := 0; from < len(e.w.Records); from += n {
			if err := e.prod.Produce(e.ctx, e.w.Records[from:min(from+n, len(e.w.Records))]); err != nil {
				fed <- err
				return
			}
			time.Sleep(pause)
		}
		fed <- nil
	}()
	return fed
}

// caught waits until the group committed every record produced to the raw
// topic (on the listed partitions only, when given).
func (e *jobEnv) caught(ch *child, only ...int32) {
	e.t.Helper()
	waitCaught(e.ctx, e.t, e.prod, e.group, e.raw, e.parts, ch, only...)
}

// term stops an instance with SIGTERM and fails the test unless it exits 0
// within 30 s.
func (e *jobEnv) term(name string, ch *child) {
	e.t.Helper()
	ch.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-ch.done:
		ch.done <- err
		if err != nil {
			e.t.Fatalf("instance %s: %v after SIGTERM, want exit 0:\n%s", name, err, ch.out.String())
		}
		// At level info the last record says why the process stopped.
		if out := ch.out.String(); strings.Contains(out, "level=INFO") {
			if last := lastLogRecord(out); !strings.Contains(last, `msg="stopped: drained after signal terminated"`) || !strings.Contains(last, "exit_code=0") {
				e.t.Errorf("instance %s: last log record after SIGTERM: %q", name, last)
			}
		}
	case <-time.After(30 * time.Second):
		e.t.Fatalf("instance %s did not exit within 30s of SIGTERM:\n%s", name, ch.out.String())
	}
}

// verify reads the output and the DLQ with the independent reader and
// checks the workload's guarantees.
func (e *jobEnv) verify() {
	e.t.Helper()
	rep, err := e.w.Verify(e.ctx, e.brokers, e.out, e.dlq, e.parts)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range rep.Problems {
		e.t.Error(p)
	}
	e.t.Logf("in=%d out=%d dlq=%d escaped=%d lost=%d", rep.In, rep.Out, rep.DLQ, rep.Escaped, rep.Lost)
}
