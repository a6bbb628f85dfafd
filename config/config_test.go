package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestLoadGood(t *testing.T) {
	c, err := load("testdata/good.yaml", env(map[string]string{"STATE_DIR": "/var/lib/ds"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Kafka.Brokers; !slices.Equal(got, []string{"127.0.0.1:9092"}) {
		t.Errorf("brokers = %v, want the ${BROKER:...} default", got)
	}
	if c.State.Dir != "/var/lib/ds" {
		t.Errorf("state.dir = %q, want interpolated /var/lib/ds", c.State.Dir)
	}
	if !slices.Equal(c.Assignment.Partitions, []int{0, 2, 4}) {
		t.Errorf("partitions = %v, want [0 2 4] from partitions-a.yaml", c.Assignment.Partitions)
	}
	if c.Output.DLQTopic != "orders-dlq" || c.Commit.Interval != 100*time.Millisecond || c.Dedup.MaxRecordBytes != 512<<10 {
		t.Errorf("defaults not applied: dlq %q interval %v max_record_bytes %v", c.Output.DLQTopic, c.Commit.Interval, c.Dedup.MaxRecordBytes)
	}
	pc, err := c.Pipeline()
	if err != nil {
		t.Fatal(err)
	}
	want := []partition.Field{{Source: partition.SourceJSON, Name: "order.id"}, {Source: partition.SourceJSON, Name: "status"}}
	if !slices.Equal(pc.Key, want) || pc.Window != 2*time.Hour || pc.Mode != pipeline.ModeFirst || pc.Generations != 4 {
		t.Errorf("pipeline config = %+v", pc)
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	_, err := load("testdata/bad.yaml", env(nil))
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *config.Error, got %v", err)
	}
	msg := err.Error()
	// Each line names the file, the line and the field path.
	for _, want := range []string{
		"testdata/bad.yaml:2: job.id: required",
		"testdata/bad.yaml:4: kafka.brokers[0]: want host:port",
		"testdata/bad.yaml:7: input.topicz: unknown key",
		"testdata/bad.yaml:9: output.topic: must differ",
		"testdata/bad.yaml:10: output.compression: must be one of",
		"assignment.partitions: static mode needs partitions or partitions_file",
		"testdata/bad.yaml:14: dedup.key[0]: ",
		`testdata/bad.yaml:15: dedup.window: want a duration such as 100ms, 30s or 24h, got "10 minutes"`,
		"testdata/bad.yaml:16: dedup.generations: must be in [1, 64], got 100",
		`testdata/bad.yaml:17: dedup.mode: must be one of first, version, got "latest"`,
		`testdata/bad.yaml:20: state.cache_size: want a size`,
		"testdata/bad.yaml:22: commit.interval: must be > 0, got -1s",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("problems lack %q; got:\n%s", want, msg)
		}
	}
	if n := len(ce.Problems); n != len(strings.Split(msg, "\n")) {
		t.Errorf("want one line per problem, got %d problems and %d lines", n, len(strings.Split(msg, "\n")))
	}
}

func TestInterpolation(t *testing.T) {
	text, problems := interpolate("f.yaml", []byte("a: ${A}\nb: ${B:dflt}\nc: $${LITERAL}\nd: ${MISSING}\n"), env(map[string]string{"A": "x"}))
	if got, want := string(text), "a: x\nb: dflt\nc: ${LITERAL}\nd: \n"; got != want {
		t.Errorf("interpolate = %q, want %q", got, want)
	}
	if len(problems) != 1 || problems[0].Line != 4 || !strings.Contains(problems[0].Msg, "MISSING") {
		t.Errorf("problems = %+v, want one for MISSING on line 4", problems)
	}
}

func TestPartitionsFileProblems(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "job.yaml")
	os.WriteFile(cfg, []byte("job: {id: j}\nkafka: {brokers: [\"h:1\"]}\ninput: {topics: [a]}\noutput: {topic: b}\nassignment: {partitions_file: p.yaml}\nstate: {dir: /s}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "p.yaml"), []byte("partitions: [1, -2]\nowner: me\n"), 0o644)
	_, err := Load(cfg)
	if err == nil || !strings.Contains(err.Error(), "p.yaml:2: owner: unknown key") || !strings.Contains(err.Error(), "partitions[1]: must be >= 0, got -2") {
		t.Fatalf("want both problems of p.yaml, got %v", err)
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"4096": 4096, "64MiB": 64 << 20, "1GB": 1e9, "2 KiB": 2048, "10B": 10} {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1MiB", "1.5GiB"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", in)
		}
	}
	if s := ByteSize(64 << 20).String(); s != "64MiB" {
		t.Errorf("String = %q", s)
	}
}

func TestMetricsListenOff(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "job.yaml")
	os.WriteFile(cfg, []byte("job: {id: j}\nkafka: {brokers: [\"h:1\"]}\ninput: {topics: [a]}\noutput: {topic: b}\nassignment: {partitions: [0]}\nstate: {dir: /s}\nmetrics: {listen: \"off\"}\n"), 0o644)
	c, err := Load(cfg)
	if err != nil || c.Metrics.Listen != "off" {
		t.Fatalf("metrics.listen off: %v, %+v", err, c)
	}
}

func TestGroupAssignment(t *testing.T) {
	dir := t.TempDir()
	write := func(assignment string) (*Config, error) {
		cfg := filepath.Join(dir, "job.yaml")
		os.WriteFile(cfg, []byte("job: {id: j}\nkafka: {brokers: [\"h:1\"]}\ninput: {topics: [a]}\noutput: {topic: b}\nstate: {dir: /s}\nassignment: "+assignment+"\n"), 0o644)
		return Load(cfg)
	}
	c, err := write("{mode: group, partitions_file: absent.yaml}")
	if err != nil {
		t.Fatalf("group mode without partitions: %v", err)
	}
	if a := c.Assignment; a.SessionTimeout != 30*time.Second || a.HeartbeatInterval != 3*time.Second || a.RebalanceTimeout != time.Minute || len(a.Partitions) != 0 {
		t.Errorf("group defaults = %+v", a)
	}
	_, err = write("{mode: group, partitions: [1], session_timeout: 6s, heartbeat_interval: 3s}")
	for _, want := range []string{
		"assignment.partitions: group mode: the consumer group assigns partitions",
		"assignment.heartbeat_interval: must be at most a third of session_timeout (6s), got 3s",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q, got %v", want, err)
		}
	}
}
