package job_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job"
)

// TestOutputRetentionWarning: an output topic that keeps records for less
// than a key is remembered cannot restore an empty store's window; the job
// says so at start, naming the setting to raise. A retention that covers
// the window gives no warning.
func TestOutputRetentionWarning(t *testing.T) {
	const warning = "the output topic's retention is shorter than the dedup window"
	for _, tc := range []struct {
		retention string
		warn      bool
	}{
		{"3600000", true},     // 1h against the default 24h window (30h remembered)
		{"2592000000", false}, // 30 days
		{"-1", false},         // kept for ever
	} {
		t.Run(tc.retention, func(t *testing.T) {
			e := newEnv(t)
			setTopicConfig(t, e, e.out, "retention.ms", tc.retention)
			logs := &logBuffer{}
			r := e.start(e.config("0, 1, 2, 3"), func(o *job.Options) {
				o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			})
			deadline := time.Now().Add(30 * time.Second)
			for r.job.Stats().Ready < partitions && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			e.stop(r)
			if r.job.Stats().Recovered == 0 {
				t.Fatalf("the job did not start its stages: %+v", r.job.Stats())
			}
			got := logs.count(warning) > 0
			if got != tc.warn {
				t.Errorf("retention.ms %s: warning logged %v, want %v; logs:\n%s", tc.retention, got, tc.warn, logs)
			}
			if got && !strings.Contains(logs.String(), "108000000") {
				t.Errorf("the warning does not name the retention to set (108000000 ms):\n%s", logs)
			}
		})
	}
}

// TestOutputCompactionWarning: a compacted output topic keeps one record
// per Kafka key. With the business key in the value (dedup.key
// json:order_id), records of many keys share a Kafka key, and a store
// restored from the compacted output misses the keys of the records it
// removed: the start warns, naming the topic and the fix. With the Kafka
// key as business key, or under cleanup.policy delete, it does not.
func TestOutputCompactionWarning(t *testing.T) {
	const warning = "the output topic is compacted and the business key is not the Kafka key"
	for _, tc := range []struct {
		policy string
		key    string
		warn   bool
	}{
		{"compact", "json:order_id", true},
		{"compact,delete", "json:order_id", true},
		{"compact", "key", false},
		{"delete", "json:order_id", false},
	} {
		t.Run(tc.policy+" "+tc.key, func(t *testing.T) {
			e := newEnv(t)
			setTopicConfig(t, e, e.out, "cleanup.policy", tc.policy)
			cfg := e.config("0, 1, 2, 3")
			cfg.Dedup.Key = []string{tc.key}
			logs := &logBuffer{}
			r := e.start(cfg, func(o *job.Options) {
				o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			})
			for deadline := time.Now().Add(30 * time.Second); r.job.Stats().Ready < partitions && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			e.stop(r)
			if got := logs.count(warning) > 0; got != tc.warn || got && !strings.Contains(logs.String(), "cleanup.policy to delete") {
				t.Errorf("cleanup.policy %s, dedup.key %s: warning logged %v, want %v; logs:\n%s", tc.policy, tc.key, got, tc.warn, logs)
			}
		})
	}
}
