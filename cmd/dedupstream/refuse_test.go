package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigRefusals: each value that parses but cannot work, or would be
// silently replaced by a default, is one "file:line: field: problem" line
// and exit 2, from lint and from run alike (run refuses before any broker
// is contacted: the brokers here do not exist).
func TestConfigRefusals(t *testing.T) {
	const base = `job: {id: j}
kafka:
  brokers: ["127.0.0.1:1"]
  transaction_timeout: 60s
input: {topics: [raw]}
output: {topic: out}
assignment: {partitions: [0, 1]}
dedup:
  key: ["json:order_id"]
  window: 1h
state: {dir: %s, memtable_size: 1MiB}
commit: {interval: 100ms}
metrics: {listen: off}
`
	for _, tc := range []struct {
		name, old, new string
		line           int
		want           string
	}{
		{"empty key list", `key: ["json:order_id"]`, `key: []`, 9, "dedup.key: must list at least one field"},
		{"zero window", `window: 1h`, `window: 0s`, 10, "dedup.window: must be > 0, got 0s"},
		{"zero generations", `window: 1h`, "window: 1h\n  generations: 0", 11, "dedup.generations: must be in [1, 64], got 0"},
		{"zero commit interval", `interval: 100ms`, `interval: 0s`, 12, "commit.interval: must be > 0, got 0s"},
		{"absurd window", `window: 1h`, `window: 2000000h`, 10, "dedup.window: must be at most 8784h0m0s (a year), got 2000000h0m0s"},
		{"absurd record size", `window: 1h`, "window: 1h\n  max_record_bytes: 10GiB", 11, "dedup.max_record_bytes: must be at most 1GiB"},
		{"transaction timeout near the interval", `transaction_timeout: 60s`, `transaction_timeout: 50ms`, 4, "kafka.transaction_timeout: must be far above commit.interval (100ms)"},
		{"partition listed twice", `partitions: [0, 1]`, `partitions: [0, 0, 1]`, 7, "assignment.partitions[1]: partition 0 is listed twice"},
		{"memtable of one byte", `memtable_size: 1MiB`, `memtable_size: 1`, 11, "state.memtable_size: must be between 32KiB and 4GiB, or 0 to derive it from state.memory, got 1"},
		{"unknown corruption policy", `memtable_size: 1MiB}`, `memtable_size: 1MiB, on_corruption: wipe}`, 11, `state.on_corruption: must be one of restore, fail, got "wipe"`},
		{"metrics listen nonsense", `listen: off`, `listen: nonsense`, 13, `metrics.listen: want host:port (127.0.0.1:9464, :9464) or "off", got "nonsense"`},
		{"broker without port", `["127.0.0.1:1"]`, `["h1"]`, 3, `kafka.brokers[0]: want host:port, got "h1"`},
		{"broker port out of range", `["127.0.0.1:1"]`, `["h1:99999"]`, 3, `kafka.brokers[0]: want a port in [1, 65535], got "99999"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			yaml := strings.Replace(fmt.Sprintf(base, filepath.Join(dir, "state")), tc.old, tc.new, 1)
			path := filepath.Join(dir, "job.yaml")
			if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("%s:%d: %s", path, tc.line, tc.want)
			for _, cmd := range [][]string{{"lint", path}, {"run", "--config", path}} {
				code, _, errOut := runCLI(t, cmd...)
				if code != exitUsage || !strings.Contains(errOut, want) {
					t.Errorf("%s: exit %d, want %d and the line\n  %s\nstderr:\n%s", cmd[0], code, exitUsage, want, errOut)
				}
			}
		})
	}
}

// TestBrokerLists: one list entry holding a comma-separated broker list
// (what configs/reference.yaml's "${KAFKA_BROKERS:...}" gives with the
// usual variable) is a list of brokers, not an address kafka-go panics on.
func TestBrokerLists(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`job: {id: j}
kafka: {brokers: ["h1:9092,h2:9092, h3:9092"]}
input: {topics: [raw]}
output: {topic: out}
assignment: {partitions: [0]}
state: {dir: %s}
`, filepath.Join(dir, "state"))), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, "lint", path); code != exitOK {
		t.Errorf("lint: exit %d\n%s%s", code, out, errOut)
	}
	t.Setenv("KAFKA_BROKERS", "h1:9092,h2:9092,h3:9092")
	t.Setenv("DEDUP_PARTITIONS_FILE", "partitions-a.yaml")
	ref := filepath.Join("..", "..", "configs", "reference.yaml")
	if code, out, errOut := runCLI(t, "lint", ref); code != exitOK {
		t.Errorf("reference.yaml with KAFKA_BROKERS=h1:9092,h2:9092,h3:9092: exit %d\n%s%s", code, out, errOut)
	}
	cfg, err := loadConfig(ref)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Kafka.Brokers, " "); got != "h1:9092 h2:9092 h3:9092" {
		t.Errorf("brokers %q, want three", got)
	}
}
