package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/config"
)

// TestLoggerRedacts: secrets never reach the log, whether logged as an
// attribute of their own, inside a struct (by Go name or yaml tag) or a
// map; other values pass unchanged.
func TestLoggerRedacts(t *testing.T) {
	type sasl struct {
		Mechanism string `yaml:"mechanism"`
		User      string `yaml:"username"`
		Pass      string `yaml:"password"`
	}
	type kafka struct {
		Brokers      []string `yaml:"brokers"`
		SASL         *sasl    `yaml:"sasl"`
		ClientSecret string
	}
	const pw = "hunter2-very-secret"
	var buf bytes.Buffer
	log := newLogger(config.Log{Level: "info", Format: "json"}, &buf)
	log.Info("connect",
		"kafka", kafka{Brokers: []string{"b1:9092"}, SASL: &sasl{Mechanism: "SCRAM-SHA-512", User: "svc", Pass: pw}, ClientSecret: pw},
		"sasl_password", pw,
		"headers", map[string]string{"Authorization-Token": pw, "trace": "t-1"},
		"err", errors.New("dial b1:9092: refused"),
	)
	out := buf.String()
	if strings.Contains(out, pw) {
		t.Fatalf("secret in the log: %s", out)
	}
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not JSON: %v: %s", err, out)
	}
	k := rec["kafka"].(map[string]any)
	if k["brokers"].([]any)[0] != "b1:9092" || k["sasl"].(map[string]any)["username"] != "svc" ||
		k["sasl"].(map[string]any)["password"] != Redacted || k["ClientSecret"] != Redacted {
		t.Errorf("kafka attribute %v", k)
	}
	if rec["sasl_password"] != Redacted || rec["headers"].(map[string]any)["trace"] != "t-1" || rec["err"] != "dial b1:9092: refused" {
		t.Errorf("record %v", rec)
	}

	// The effective config the run command logs at debug level.
	buf.Reset()
	cfg := &config.Config{Kafka: config.Kafka{Brokers: []string{"b1:9092"}}}
	newLogger(config.Log{Level: "debug", Format: "text"}, &buf).Debug("config", "config", cfg)
	if !strings.Contains(buf.String(), "b1:9092") || !strings.HasPrefix(buf.String(), "time=") {
		t.Errorf("text log of the config: %s", buf.String())
	}
}

func TestLogLevelFlag(t *testing.T) {
	for _, cmd := range []string{"run", "demo", "broker", "verify", "inspect"} {
		code, _, errOut := runCLI(t, cmd, "--log-level", "loud")
		if code != exitUsage || !strings.Contains(errOut, `invalid value "loud" for flag -log-level: want one of debug, info, warn, error`) {
			t.Errorf("%s --log-level loud: exit %d, stderr %q", cmd, code, errOut)
		}
		if code, out, _ := runCLI(t, cmd, "--help"); code != exitOK || !strings.Contains(out, "-log-level") {
			t.Errorf("%s --help lacks --log-level:\n%s", cmd, out)
		}
	}
	// A level hides what is below it.
	var buf bytes.Buffer
	log := newLogger(config.Log{Level: "warn", Format: "json"}, &buf)
	log.Info("hidden")
	log.Warn("shown")
	if strings.Contains(buf.String(), "hidden") || !strings.Contains(buf.String(), `"level":"WARN"`) {
		t.Errorf("warn logger wrote %q", buf.String())
	}
}
