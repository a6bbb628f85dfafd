package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"go.yaml.in/yaml/v3"
)

const password = "hunter2-Pa55"

// TestSecretRedacted prints a loaded config with a password every way the
// code or an operator might: none shows it, and Reveal still gives it.
func TestSecretRedacted(t *testing.T) {
	c := &Config{Kafka: Kafka{SASL: SASL{Mechanism: SASLPlain, Username: "u", Password: Secret(password)}}}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("cfg", "config", c, "kafka", c.Kafka, "password", c.Kafka.SASL.Password)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("cfg", "config", c, "sasl", c.Kafka.SASL, "password", c.Kafka.SASL.Password)
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	ys, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{
		"slog":  logs.String(),
		"json":  string(js),
		"yaml":  string(ys),
		"error": fmt.Errorf("load: %v", c.Kafka.SASL).Error(),
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s"} {
		outputs["fmt "+verb] = fmt.Sprintf(verb+" "+verb, c, c.Kafka.SASL.Password)
	}
	for name, out := range outputs {
		if strings.Contains(out, password) || strings.Contains(out, fmt.Sprintf("%x", password)) {
			t.Errorf("%s shows the password: %s", name, out)
		}
		if !strings.Contains(out, "REDACTED") {
			t.Errorf("%s does not say REDACTED: %s", name, out)
		}
	}
	if got := c.Kafka.SASL.Password.Reveal(); got != password {
		t.Errorf("Reveal = %q, want %q", got, password)
	}
}

// writeJob writes a config file whose kafka section ends with security
// (indented two spaces), and returns its path.
func writeJob(t *testing.T, dir, security string) string {
	t.Helper()
	path := filepath.Join(dir, "job.yaml")
	text := "job: {id: j}\nkafka:\n  brokers: [\"127.0.0.1:9092\"]\n" + security +
		"\ninput: {topics: [raw]}\noutput: {topic: out}\nassignment: {partitions: [0]}\nstate: {dir: /tmp/s}\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadSecurity(t *testing.T) {
	dir := t.TempDir()
	pki := kafkatest.NewPKI(t)
	// Relative paths are relative to the config file.
	for name, src := range map[string]string{"ca.pem": pki.CAFile, "client.pem": pki.CertFile, "client-key.pem": pki.KeyFile} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := writeJob(t, dir, `  tls: {enabled: true, ca_file: ca.pem, cert_file: client.pem, key_file: client-key.pem, server_name: kafka.internal}
  sasl:
    mechanism: SCRAM-SHA-512
    username: dedup
    password: "${KAFKA_PASSWORD}"`)
	c, err := load(path, env(map[string]string{"KAFKA_PASSWORD": password}))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "ca.pem"); c.Kafka.TLS.CAFile != want {
		t.Errorf("ca_file = %q, want %q (relative to the config file)", c.Kafka.TLS.CAFile, want)
	}
	tc, err := c.Kafka.TLS.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "kafka.internal" || tc.InsecureSkipVerify {
		t.Errorf("tls config: roots %v, %d certificates, server name %q, insecure %v", tc.RootCAs != nil, len(tc.Certificates), tc.ServerName, tc.InsecureSkipVerify)
	}
	if pw, err := c.Kafka.SASL.Secret(); err != nil || pw.Reveal() != password || c.Kafka.SASL.Username != "dedup" {
		t.Errorf("sasl: user %q, password matches %v, err %v", c.Kafka.SASL.Username, pw.Reveal() == password, err)
	}

	// A password file: one trailing line break is not part of it.
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte(password+" \r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = load(writeJob(t, dir, "  sasl: {mechanism: PLAIN, username: dedup, password_file: pw}"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if pw, err := c.Kafka.SASL.Secret(); err != nil || pw.Reveal() != password+" " {
		t.Errorf("password from file: got %d bytes (want %d), err %v", len(pw.Reveal()), len(password)+1, err)
	}
	if tc, err := c.Kafka.TLS.TLSConfig(); tc != nil || err != nil {
		t.Errorf("tls off: got config %v, err %v", tc, err)
	}
}

func TestLoadSecurityProblems(t *testing.T) {
	dir := t.TempDir()
	pki, other := kafkatest.NewPKI(t), kafkatest.NewPKI(t)
	notPEM := filepath.Join(dir, "not.pem")
	empty := filepath.Join(dir, "empty")
	for _, f := range []string{notPEM, empty} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name, security string
		want           []string // each a whole problem line after the file name
	}{
		{"tls fields while off", "  tls: {ca_file: " + pki.CAFile + "}",
			[]string{":4: kafka.tls.enabled: is false but other tls fields are set: set enabled: true, or remove them"}},
		{"unreadable ca", "  tls: {enabled: true, ca_file: " + missing + "}",
			[]string{":4: kafka.tls.ca_file: open " + missing + ": no such file or directory"}},
		{"ca not PEM", "  tls: {enabled: true, ca_file: " + notPEM + "}",
			[]string{":4: kafka.tls.ca_file: " + notPEM + ": no PEM certificate in the file"}},
		{"cert without key", "  tls: {enabled: true, cert_file: " + pki.CertFile + "}",
			[]string{":4: kafka.tls.cert_file: set together with key_file (both or neither)"}},
		{"key of another cert", fmt.Sprintf("  tls: {enabled: true, cert_file: %s, key_file: %s}", pki.CertFile, other.KeyFile),
			[]string{":4: kafka.tls.cert_file: " + pki.CertFile + " and key_file " + other.KeyFile + ": tls: private key does not match public key"}},
		{"unknown mechanism", "  sasl: {mechanism: GSSAPI, username: u, password: " + password + "}",
			[]string{`:4: kafka.sasl.mechanism: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, got "GSSAPI"`}},
		{"lower-case mechanism", "  sasl: {mechanism: plain, username: u, password: " + password + "}",
			[]string{`:4: kafka.sasl.mechanism: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, got "plain"`}},
		{"no username, no password", "  sasl:\n    mechanism: SCRAM-SHA-256",
			[]string{":5: kafka.sasl.username: required with mechanism SCRAM-SHA-256",
				`:5: kafka.sasl.password: required with mechanism SCRAM-SHA-256: set password (e.g. "${KAFKA_PASSWORD}") or password_file`}},
		{"password twice", "  sasl: {mechanism: PLAIN, username: u, password: " + password + ", password_file: " + empty + "}",
			[]string{":4: kafka.sasl.password_file: set password or password_file, not both"}},
		{"empty password file", "  sasl: {mechanism: PLAIN, username: u, password_file: " + empty + "}",
			[]string{":4: kafka.sasl.password_file: " + empty + ": the file is empty"}},
		{"missing password file", "  sasl: {mechanism: PLAIN, username: u, password_file: " + missing + "}",
			[]string{":4: kafka.sasl.password_file: open " + missing + ": no such file or directory"}},
		{"credentials without mechanism", "  sasl: {username: u, password: " + password + "}",
			[]string{":4: kafka.sasl.mechanism: required when username, password or password_file is set: one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"}},
		{"unknown key", "  sasl: {mechanism: PLAIN, user: u, password: " + password + "}",
			[]string{":4: kafka.sasl.user: unknown key (known keys here: mechanism, username, password, password_file)",
				":4: kafka.sasl.username: required with mechanism PLAIN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeJob(t, t.TempDir(), tc.security)
			_, err := load(path, env(nil))
			if err == nil {
				t.Fatal("loaded without problems")
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, path+w)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("problems show the password: %v", err)
			}
		})
	}
}
