package job_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const (
	saslUser = "dedup"
	saslPass = "s3cr3t-Pa55"
)

// kgoSASL is the independent client's side of mechanism.
func kgoSASL(mechanism string) sasl.Mechanism {
	switch mechanism {
	case config.SASLSCRAMSHA256:
		return scram.Auth{User: saslUser, Pass: saslPass}.AsSha256Mechanism()
	case config.SASLSCRAMSHA512:
		return scram.Auth{User: saslUser, Pass: saslPass}.AsSha512Mechanism()
	}
	return plain.Auth{User: saslUser, Pass: saslPass}.AsMechanism()
}

// runSecured runs a small workload through the job on secured brokers
// and checks the output with the independent reader: in group mode the
// consumer group's Dialer must be secured like the Transport, or the group
// never forms.
func runSecured(e *env, group bool) {
	e.t.Helper()
	w := e.workload(21, 2_000, 500)
	cfg := e.config("0, 1, 2, 3")
	if group {
		cfg = e.groupConfig("a")
	}
	r := e.start(cfg)
	e.feed(w, 20*time.Millisecond)
	e.waitCommitted(r, 1, 45*time.Second)
	e.stop(r)
	st := r.job.Stats()
	if group && st.Generations == 0 {
		e.t.Errorf("group mode: no generation joined: %+v", st)
	}
	e.verify(w, st)
}

// TestSASL runs the job end to end over each SASL mechanism, once in each
// assignment mode; the password reaches the config through ${VAR}, as in
// production.
func TestSASL(t *testing.T) {
	kafkatest.SkipExternal(t, "the embedded broker is started with SASL users")
	for _, tc := range []struct {
		mechanism string
		group     bool
	}{
		{config.SASLPlain, false},
		{config.SASLSCRAMSHA256, true},
		{config.SASLSCRAMSHA512, false},
	} {
		t.Run(tc.mechanism, func(t *testing.T) {
			t.Setenv("TEST_KAFKA_PASSWORD", saslPass)
			e := newSecureEnv(t,
				[]kfake.Opt{kfake.EnableSASL(), kfake.Superuser(tc.mechanism, saslUser, saslPass)},
				fmt.Sprintf(`  sasl: {mechanism: %s, username: %s, password: "${TEST_KAFKA_PASSWORD}"}`, tc.mechanism, saslUser),
				[]kgo.Opt{kgo.SASL(kgoSASL(tc.mechanism))})
			runSecured(e, tc.group)
		})
	}
}

// TestTLS runs the job end to end over mutual TLS with a CA made for the
// test (the broker requires the client certificate), in group mode, and
// with SASL PLAIN on top in static mode, the password read from a file.
func TestTLS(t *testing.T) {
	kafkatest.SkipExternal(t, "the embedded broker is started with a test CA")
	pki := kafkatest.NewPKI(t)
	tlsYAML := fmt.Sprintf("  tls: {enabled: true, ca_file: %s, cert_file: %s, key_file: %s}", pki.CAFile, pki.CertFile, pki.KeyFile)
	t.Run("mTLS group", func(t *testing.T) {
		e := newSecureEnv(t, []kfake.Opt{kfake.TLS(pki.Server)}, tlsYAML, []kgo.Opt{kgo.DialTLSConfig(pki.Client)})
		runSecured(e, true)
	})
	t.Run("mTLS and PLAIN", func(t *testing.T) {
		passFile := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(passFile, []byte(saslPass+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		e := newSecureEnv(t,
			[]kfake.Opt{kfake.TLS(pki.Server), kfake.EnableSASL(), kfake.Superuser(config.SASLPlain, saslUser, saslPass)},
			tlsYAML+fmt.Sprintf("\n  sasl: {mechanism: PLAIN, username: %s, password_file: %s}", saslUser, passFile),
			[]kgo.Opt{kgo.DialTLSConfig(pki.Client), kgo.SASL(kgoSASL(config.SASLPlain))})
		runSecured(e, false)
	})
}

// TestAuthFailures: credentials or certificates the brokers refuse stop
// the job at start-up with ErrAuth, well before the metadata retries would
// give up, and the error never shows the password.
func TestAuthFailures(t *testing.T) {
	kafkatest.SkipExternal(t, "the embedded broker is started with SASL users and a test CA")
	pki, other := kafkatest.NewPKI(t), kafkatest.NewPKI(t)
	const wrong = "not-the-Pa55word"
	saslCluster := []kfake.Opt{kfake.EnableSASL(), kfake.Superuser(config.SASLSCRAMSHA256, saslUser, saslPass)}
	tlsCluster := []kfake.Opt{kfake.TLS(pki.Server)}
	for _, tc := range []struct {
		name      string
		cluster   []kfake.Opt
		client    []kgo.Opt
		kafkaYAML string // of the job under test
	}{
		{"wrong password", saslCluster, []kgo.Opt{kgo.SASL(kgoSASL(config.SASLSCRAMSHA256))},
			fmt.Sprintf("  sasl: {mechanism: SCRAM-SHA-256, username: %s, password: %s}", saslUser, wrong)},
		{"unknown user", saslCluster, []kgo.Opt{kgo.SASL(kgoSASL(config.SASLSCRAMSHA256))},
			fmt.Sprintf("  sasl: {mechanism: SCRAM-SHA-256, username: nobody, password: %s}", wrong)},
		{"PLAIN for a SCRAM user", saslCluster, []kgo.Opt{kgo.SASL(kgoSASL(config.SASLSCRAMSHA256))},
			fmt.Sprintf("  sasl: {mechanism: PLAIN, username: %s, password: %s}", saslUser, wrong)},
		{"untrusted broker certificate", tlsCluster, []kgo.Opt{kgo.DialTLSConfig(pki.Client)},
			fmt.Sprintf("  tls: {enabled: true, ca_file: %s, cert_file: %s, key_file: %s}", other.CAFile, pki.CertFile, pki.KeyFile)},
		{"client certificate of another CA", tlsCluster, []kgo.Opt{kgo.DialTLSConfig(pki.Client)},
			fmt.Sprintf("  tls: {enabled: true, ca_file: %s, cert_file: %s, key_file: %s}", pki.CAFile, other.CertFile, other.KeyFile)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSecureEnv(t, tc.cluster, "", tc.client)
			e.kafkaYAML = tc.kafkaYAML
			r := e.start(e.config("0, 1"), func(o *job.Options) { o.RetryTimeout = 30 * time.Second })
			began := time.Now()
			err := r.wait(t, 20*time.Second)
			if !errors.Is(err, job.ErrAuth) {
				t.Fatalf("want job.ErrAuth, got %v", err)
			}
			if took := time.Since(began); took > 10*time.Second {
				t.Errorf("the job retried for %v before giving up; an authentication failure should stop it at once", took)
			}
			if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), saslPass) {
				t.Errorf("the error shows a password: %v", err)
			}
			t.Log(err)
		})
	}
}
