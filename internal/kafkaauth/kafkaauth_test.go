package kafkaauth

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/kafkatest"
)

func TestMechanism(t *testing.T) {
	for _, name := range []string{config.SASLPlain, config.SASLSCRAMSHA256, config.SASLSCRAMSHA512} {
		m, err := Mechanism(config.SASL{Mechanism: name, Username: "u", Password: "p"})
		if err != nil || m == nil || m.Name() != name {
			t.Errorf("%s: got mechanism %v, err %v", name, m, err)
		}
	}
	if m, err := Mechanism(config.SASL{}); m != nil || err != nil {
		t.Errorf("no mechanism configured: got %v, %v; want nil, nil", m, err)
	}
	// SASLprep rejects a control character; the error must not quote the
	// password back.
	const bad = "zq\u0007xv"
	_, err := Mechanism(config.SASL{Mechanism: config.SASLSCRAMSHA256, Username: "u", Password: bad})
	if err == nil || strings.Contains(err.Error(), "zq") || strings.Contains(err.Error(), "xv") {
		t.Errorf("want an error that does not show the password, got %v", err)
	}
}

func TestNew(t *testing.T) {
	pki := kafkatest.NewPKI(t)
	a, err := New(config.Kafka{
		TLS:  config.TLS{Enabled: true, CAFile: pki.CAFile, CertFile: pki.CertFile, KeyFile: pki.KeyFile},
		SASL: config.SASL{Mechanism: config.SASLPlain, Username: "u", Password: "p"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.TLS == nil || a.TLS.RootCAs == nil || len(a.TLS.Certificates) != 1 || a.SASL == nil || a.SASL.Name() != config.SASLPlain {
		t.Errorf("auth = %+v", a)
	}
	if a, err := New(config.Kafka{}); a.TLS != nil || a.SASL != nil || err != nil {
		t.Errorf("nothing configured: got %+v, %v", a, err)
	}
	// A file that went away after the config was validated.
	gone := filepath.Join(t.TempDir(), "pw")
	_, err = New(config.Kafka{SASL: config.SASL{Mechanism: config.SASLPlain, Username: "u", PasswordFile: gone}})
	if err == nil || !strings.HasPrefix(err.Error(), "kafka.sasl: password_file: open "+gone) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing password file: got %v", err)
	}
	_, err = New(config.Kafka{TLS: config.TLS{Enabled: true, CAFile: gone}})
	if err == nil || !strings.HasPrefix(err.Error(), "kafka.tls: ca_file: open "+gone) {
		t.Errorf("missing CA file: got %v", err)
	}
}
