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
			path := filepath.Join(t.TempDir(), "job.yaml")
			if err := os.WriteFile(path, []byte(base+tc.extra), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := load(path, env(nil))
			if tc.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("want problem %q, got %v", tc.problem, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Commit.ShutdownTimeout != tc.want {
				t.Errorf("commit.shutdown_timeout = %v, want %v", c.Commit.ShutdownTimeout, tc.want)
			}
		})
	}
}
