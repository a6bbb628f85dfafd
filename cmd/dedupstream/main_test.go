package main

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
	"github.com/segmentio/kafka-go"
)

// Environment of a child process: the test binary re-executed as the
// dedupstream command (see TestMain), optionally killing itself with
// SIGKILL at the n-th pass through a failpoint.
const (
	envChild     = "DEDUPSTREAM_TEST_CHILD"
	envFailpoint = "DEDUPSTREAM_TEST_FAILPOINT" // "name:n[:stop]"
	// envCut routes the child's broker connections through a
	// kafkatest.Link that SIGUSR1 cuts and SIGUSR2 heals.
	envCut = "DEDUPSTREAM_TEST_CUT"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		if fp := os.Getenv(envFailpoint); fp != "" {
			optionsHook = failpointHook(fp)
		}
		if os.Getenv(envCut) == "1" {
			optionsHook = cutHook(optionsHook)
		}
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// failpointHook parses "name:n[:stop]": at the n-th pass through failpoint
// name the child kills itself with SIGKILL, or with ":stop" freezes itself
// once with SIGSTOP (a zombie: its heartbeats stop too) and carries on
// from the failpoint when the test sends SIGCONT.
func failpointHook(fp string) func(*job.Options) {
	parts := strings.Split(fp, ":")
	name, n := parts[0], 1
	if len(parts) > 1 {
		n, _ = strconv.Atoi(parts[1])
	}
	stop := len(parts) > 2 && parts[2] == "stop"
	var hits atomic.Int64
	return func(o *job.Options) {
		testhook.Set(o, testhook.Hooks{Failpoint: func(at string) {
			if at != name {
				return
			}
			switch h := hits.Add(1); {
			case stop && h == int64(n):
				// The stop reaches the process's threads asynchronously:
				// this goroutine could go on (to EndTxn) before it lands,
				// and the child would freeze at some later point instead,
				// perhaps between transactions. It waits for the test's
				// SIGCONT, so the freeze is at this failpoint every time.
				cont := make(chan os.Signal, 1)
				signal.Notify(cont, syscall.SIGCONT)
				fmt.Fprintf(os.Stderr, "failpoint %s: stopping myself\n", name)
				syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				<-cont
				signal.Stop(cont)
			case !stop && h >= int64(n):
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // wait for the signal
			}
		}})
	}
}

// cutHook wraps hook: the job's transport dials through a link that
// SIGUSR1 cuts and SIGUSR2 heals.
func cutHook(hook func(*job.Options)) func(*job.Options) {
	return func(o *job.Options) {
		hook(o)
		link := kafkatest.NewLink()
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
		go func() {
			for s := range sigs {
				if s == syscall.SIGUSR1 {
					fmt.Fprintln(os.Stderr, "test: link cut")
					link.Cut()
				} else {
					fmt.Fprintln(os.Stderr, "test: link healed")
					link.Heal()
				}
			}
		}()
		o.Transport = &kafka.Transport{ClientID: "dedupstream-cut", DialTimeout: 2 * time.Second, Dial: link.Dial}
	}
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout, or in stderr for non-zero codes
	}{
		{nil, exitUsage, "Commands:"},
		{[]string{"--help"}, exitOK, "Commands:"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"version"}, exitOK, "dedupstream "},
		{[]string{"version", "--help"}, exitOK, "Usage: dedupstream version"},
		{[]string{"run", "--help"}, exitOK, "Usage: dedupstream run --config FILE"},
		{[]string{"lint", "--help"}, exitOK, "Usage: dedupstream lint FILE..."},
		{[]string{"broker", "--help"}, exitOK, "Usage: dedupstream broker"},
		{[]string{"demo", "--help"}, exitOK, "Usage: dedupstream demo"},
		{[]string{"run"}, exitUsage, "want --config FILE"},
		{[]string{"run", "--nope"}, exitUsage, "flag provided but not defined"},
		{[]string{"lint"}, exitUsage, "no config files given"},
		{[]string{"run", "--config", "/does/not/exist.yaml"}, exitUsage, "/does/not/exist.yaml: open"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			code, out, errOut := runCLI(t, tc.args...)
			got := out
			if tc.code != exitOK {
				got = errOut
			}
			if code != tc.code || !strings.Contains(got, tc.out) {
				t.Errorf("exit %d, want %d; output lacks %q:\nstdout: %s\nstderr: %s", code, tc.code, tc.out, out, errOut)
			}
		})
	}
}

func TestLintReportsFieldPaths(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(`job: {id: j}
kafka: {brokers: ["127.0.0.1:9092"]}
input:
  topics: [raw]
  topicz: [typo]
output:
  dlq_topic: raw-dlq
assignment: {partitions: [0]}
dedup:
  window: 10 minutes
state: {dir: /tmp/s}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join("..", "..", "configs", "reference.yaml")
	code, out, errOut := runCLI(t, "lint", good, filepath.Join("..", "..", "configs", "demo.yaml"), bad)
	if code != exitUsage {
		t.Errorf("lint exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(out, "reference.yaml: ok") || !strings.Contains(out, "demo.yaml: ok") {
		t.Errorf("stdout lacks the good file's ok line:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	want := []string{
		bad + ":5: input.topicz: unknown key",
		bad + ":7: output.topic: required",
		bad + `:10: dedup.window: want a duration such as 100ms, 30s or 24h, got "10 minutes"`,
	}
	if len(lines) != len(want) {
		t.Errorf("want %d problem lines, got %d:\n%s", len(want), len(lines), errOut)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}
	// The run command reports the same problems with the same exit code.
	if code, _, errOut := runCLI(t, "run", "--config", bad); code != exitUsage || !strings.Contains(errOut, "input.topicz: unknown key") {
		t.Errorf("run --config bad: exit %d, stderr:\n%s", code, errOut)
	}
}

func TestLintExamples(t *testing.T) {
	for _, pf := range []string{"partitions-a.yaml", "partitions-b.yaml"} {
		t.Setenv("DEDUP_PARTITIONS_FILE", pf)
		if code, out, errOut := runCLI(t, "lint", filepath.Join("..", "..", "configs", "reference.yaml")); code != exitOK {
			t.Errorf("reference.yaml with %s: exit %d\n%s%s", pf, code, out, errOut)
		}
	}
}

// TestDemo runs the demo end to end: over 100k records with every kind of
// duplicate, checked by an independent read_committed reader.
func TestDemo(t *testing.T) {
	code, out, errOut := runCLI(t, "demo", "--keys", "70000", "--replay", "15000")
	if code != exitOK || !strings.Contains(out, "PASS") {
		t.Fatalf("demo exit %d:\n%s%s", code, out, errOut)
	}
	var in int
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "records" && f[1] == "in" {
			in, _ = strconv.Atoi(f[2])
		}
	}
	if in < 100_000 {
		t.Errorf("demo ran %d records, want >= 100000:\n%s", in, out)
	}
}

// TestRunMissingTopic: a config naming topics the cluster lacks is a
// config error (exit 2) with the field paths, found before any work.
func TestRunMissingTopic(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	raw, out := kafkatest.TopicName("raw"), kafkatest.TopicName("out")
	kafkatest.CreateTopics(t, brokers, 2, raw, out)
	path := filepath.Join(t.TempDir(), "job.yaml")
	os.WriteFile(path, fmt.Appendf(nil, `job: {id: j}
kafka: {brokers: [%q]}
input: {topics: [%s, nosuch]}
output: {topic: %s}
assignment: {partitions: [0, 5]}
state: {dir: %s}
metrics: {listen: "127.0.0.1:0"}
log: {level: error}
`, brokers[0], raw, out, filepath.Join(t.TempDir(), "state")), 0o644)
	code, _, errOut := runCLI(t, "run", "--config", path)
	for _, want := range []string{
		`input.topics[1]: topic "nosuch" does not exist`,
		fmt.Sprintf(`output.dlq_topic: topic "%s-dlq" does not exist`, out),
		"assignment.partitions[1]: partition 5 does not exist",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if code != exitUsage {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitUsage, errOut)
	}
}
