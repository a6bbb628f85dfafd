package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestShutdownTimeout(t *testing.T) {
	base := "job: {id: j}\nkafka: {brokers: [\"h:1\"]}\ninput: {topics: [in]}\noutput: {topic: out}\nassignment: {partitions: [0]}\nstate: {dir: /tmp/s}\n"
	for _, tc := range []struct {
		name, extra string
		want        time.Duration
		problem     string
	}{
		{name: "default", want: 30 * time.Second},
		{name: "set", extra: "commit: {shutdown_timeout: 5s}\n", want: 5 * time.Second},
		{name: "negative", extra: "commit:\n  shutdown_timeout: -1s\n", problem: "job.yaml:8: commit.shutdown_timeout: must be > 0, got -1s"},
		{name: "not a duration", extra: "commit:\n  shutdown_timeout: soon\n", problem: `job.yaml:8: commit.shutdown_timeout: want a duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := loadCase(t, base+tc.extra, tc.problem)
			if !ok {
				return
			}
			if c.Commit.ShutdownTimeout != tc.want {
				t.Errorf("commit.shutdown_timeout = %v, want %v", c.Commit.ShutdownTimeout, tc.want)
			}
		})
	}
}

// loadCase loads a job file holding text. With problem set, the load must
// fail with an error containing it, and loadCase returns false; otherwise
// the load must succeed, and loadCase returns the config and true.
func loadCase(t *testing.T, text, problem string) (*Config, bool) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := load(path, env(nil))
	if problem != "" {
		if err == nil || !strings.Contains(err.Error(), problem) {
			t.Fatalf("want problem %q, got %v", problem, err)
		}
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return c, true
}
