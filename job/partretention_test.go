package job_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// createTopicWith creates topic with n partitions and the topic configs
// cfgs, as an operator or a provisioning tool would before the job first
// starts.
func createTopicWith(t *testing.T, e *env, topic string, n int32, cfgs map[string]string) {
	t.Helper()
	cl := kafkatest.NewClient(t, e.brokers, e.clientOpts...)
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, n, -1
	for k, v := range cfgs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30_000
	res, err := req.RequestWith(e.ctx(30*time.Second), cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(res.Topics[0].ErrorCode); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	if err := kafkatest.WaitTopics(e.ctx(60*time.Second), cl, n, topic); err != nil {
		t.Fatal(err)
	}
}

// TestPartitionsTopicRetention: the partitions topic exists before the
// job first starts, created with the configs a tool or an operator gave
// it. Where retention may delete its records (delete, or compact,delete,
// with a finite retention.ms or retention.bytes), run refuses with
// ErrTopics (exit 2) naming the topic, the settings and the command that
// fixes it, before it records anything or emits a record, and so does
// migrate, before it removes any state. After the fix the job runs.
// Where retention cannot delete them it runs as usual (checked with kgo).
func TestPartitionsTopicRetention(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfgs map[string]string
		want string // in the refusal; "" for a start that runs
	}{
		// Each case sets both retentions: the brokers' defaults differ (the
		// test cluster's log.retention.bytes is finite).
		{"delete", map[string]string{"cleanup.policy": "delete", "retention.ms": "604800000", "retention.bytes": "-1"}, "cleanup.policy=delete, retention.ms=604800000"},
		{"compact,delete", map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "86400000", "retention.bytes": "-1"}, "cleanup.policy=compact,delete, retention.ms=86400000"},
		{"delete by size", map[string]string{"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "1048576"}, "cleanup.policy=delete, retention.bytes=1048576"},
		{"delete kept for ever", map[string]string{"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}, ""},
		{"compact with a lag", map[string]string{"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			topic := job.PartitionsTopic(e.jobID)
			createTopicWith(t, e, topic, 1, tc.cfgs)
			w := e.workload(41, 500, 100)
			e.produce(w.Records)
			cfg := e.config("0, 1, 2, 3")
			if tc.want == "" {
				r := e.runToEnd(cfg)
				e.verify(w, r.job.Stats())
				return
			}
			r := e.start(cfg)
			err := r.wait(t, 30*time.Second)
			if !errors.Is(err, job.ErrTopics) || !strings.Contains(err.Error(), `"`+topic+`"`) || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "--entity-name "+topic+" --add-config cleanup.policy=compact") {
				t.Fatalf("run: want ErrTopics naming %s, %q and the fix, got %v", topic, tc.want, err)
			}
			t.Logf("run refused: %v", err)
			if st := r.job.Stats(); st.Recoveries != 0 || st.Emitted != 0 {
				t.Errorf("the refused start went on: %+v", st)
			}
			if out, _ := e.readOutput(); len(out) != 0 {
				t.Errorf("the refused start emitted %d records", len(out))
			}

			// migrate refuses too, and leaves the state as it was.
			if err := os.MkdirAll(job.StateDir(cfg.State.Dir, 0), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(job.StateDir(cfg.State.Dir, 0)+"/keep", nil, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = job.Migrate(e.ctx(60*time.Second), cfg, job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second})
			if !errors.Is(err, job.ErrTopics) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("migrate: want ErrTopics naming %q, got %v", tc.want, err)
			}
			if _, err := os.Stat(job.StateDir(cfg.State.Dir, 0) + "/keep"); err != nil {
				t.Errorf("the refused migrate touched the state: %v", err)
			}
			if err := os.RemoveAll(job.StateDir(cfg.State.Dir, 0)); err != nil {
				t.Fatal(err)
			}

			setTopicConfig(t, e, topic, "cleanup.policy", "compact") // the fix the message names
			r = e.runToEnd(cfg)
			e.verify(w, r.job.Stats())
		})
	}
}
