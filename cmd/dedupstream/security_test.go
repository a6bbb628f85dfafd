package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// securedConfig writes a job config whose kafka section ends with sasl.
func securedConfig(t *testing.T, broker, sasl string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "job.yaml")
	text := fmt.Sprintf(`job: {id: secured}
kafka:
  brokers: [%q]
%s
input: {topics: [raw]}
output: {topic: out}
assignment: {partitions: [0]}
state: {dir: %s}
metrics: {listen: "off"}
`, broker, sasl, filepath.Join(dir, "state"))
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunRefused: brokers that refuse the password stop "run" at once with
// exit 1 and an error that names the cause, not the password; "lint"
// rejects an unknown mechanism with exit 2.
func TestRunRefused(t *testing.T) {
	const pass, wrong = "right-Pa55", "wrong-Pa55"
	c := kafkatest.NewCluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "dedup", pass))
	t.Setenv("TEST_KAFKA_PASSWORD", wrong)
	path := securedConfig(t, c.ListenAddrs()[0], `  sasl: {mechanism: SCRAM-SHA-512, username: dedup, password: "${TEST_KAFKA_PASSWORD}"}`)
	code, stdout, stderr := runCLI(t, "run", "--config", path)
	if code != exitFailure {
		t.Errorf("run: exit %d, want %d; stderr:\n%s", code, exitFailure, stderr)
	}
	if !strings.Contains(stderr, "cannot connect securely to the brokers") || !strings.Contains(stderr, "refused SASL SCRAM-SHA-512") {
		t.Errorf("run: stderr does not explain the refusal:\n%s", stderr)
	}
	if strings.Contains(stdout+stderr, wrong) {
		t.Errorf("run: output shows the password:\n%s\n%s", stdout, stderr)
	}

	path = securedConfig(t, "127.0.0.1:9092", "  sasl: {mechanism: GSSAPI, username: dedup, password: "+wrong+"}")
	code, _, stderr = runCLI(t, "lint", path)
	if want := path + ":4: kafka.sasl.mechanism: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"; code != exitUsage || !strings.Contains(stderr, want) {
		t.Errorf("lint: exit %d, stderr %q; want exit %d and %q", code, stderr, exitUsage, want)
	}
}

// TestVerifySecured: verify --config reaches brokers that demand SASL with
// the config's credentials, and finds the repeat planted there.
func TestVerifySecured(t *testing.T) {
	const pass = "verify-Pa55"
	c := kafkatest.NewCluster(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "dedup", pass), kfake.SeedTopics(1, "out"))
	cl := kafkatest.NewClient(t, c.ListenAddrs(), kgo.SASL(scram.Auth{User: "dedup", Pass: pass}.AsSha256Mechanism()))
	for _, k := range []string{"a", "b", "a"} {
		if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: "out", Key: []byte(k), Value: []byte(`{"order_id":"` + k + `"}`)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TEST_KAFKA_PASSWORD", pass)
	path := securedConfig(t, c.ListenAddrs()[0], `  sasl: {mechanism: SCRAM-SHA-256, username: dedup, password: "${TEST_KAFKA_PASSWORD}"}`)
	code, stdout, stderr := runCLI(t, "verify", "--config", path, "--key", "key")
	if code != exitFailure || !strings.Contains(stdout, `key "a":`) || !strings.Contains(stdout, "records          3") {
		t.Fatalf("verify: exit %d, want %d for the repeated key a; stdout:\n%s\nstderr:\n%s", code, exitFailure, stdout, stderr)
	}
	t.Setenv("TEST_KAFKA_PASSWORD", "wrong")
	if code, _, stderr := runCLI(t, "verify", "--config", path, "--key", "key"); code == exitOK {
		t.Errorf("verify with a wrong password: exit 0; stderr:\n%s", stderr)
	}
}
