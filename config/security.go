package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// TLS encrypts every connection to the brokers.
type TLS struct {
	// Enabled turns TLS on; the other fields are errors while it is off,
	// so that a forgotten "enabled: true" does not silently send
	// plaintext. The default value is false.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the certificate authorities that sign the
	// brokers' certificates, relative to the config file. The default
	// value is "": the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the PEM client certificate and its private
	// key, for brokers that require client authentication (mutual TLS),
	// relative to the config file. Set both or neither. The default value
	// is "": no client certificate.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name checked against the brokers' certificates.
	// The default value is "": the host of each broker address dialled.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any broker certificate: encryption
	// without authentication of the broker, for tests only. The default
	// value is false.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// SASL mechanisms.
const (
	SASLPlain       = "PLAIN"
	SASLSCRAMSHA256 = "SCRAM-SHA-256"
	SASLSCRAMSHA512 = "SCRAM-SHA-512"
)

// SASL authenticates every connection to the brokers.
type SASL struct {
	// Mechanism is "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512". PLAIN
	// sends the password as it is: use it only with TLS. The default
	// value is "": no SASL.
	Mechanism string `yaml:"mechanism"`
	// Username is required with a mechanism.
	Username string `yaml:"username"`
	// Password is the password itself, normally "${VAR}" from the
	// environment; it is printed and logged as REDACTED. Exactly one of
	// Password and PasswordFile is required with a mechanism.
	Password Secret `yaml:"password"`
	// PasswordFile holds the password (one trailing line break is
	// ignored), relative to the config file; it is read once at start.
	PasswordFile string `yaml:"password_file"`
}

// Secret is a string that does not show itself: fmt, log/slog,
// encoding/json and YAML encoders all print "REDACTED", so a config or an
// error that carries one cannot leak it. Reveal returns the value.
type Secret string

const redacted = "REDACTED"

// Reveal returns the secret itself, for the one place that needs it.
func (s Secret) Reveal() string { return string(s) }

// String, Format (every fmt verb, %#v included), LogValue and MarshalText
// (encoding/json, YAML) all give "REDACTED".
func (Secret) String() string               { return redacted }
func (Secret) Format(f fmt.State, _ rune)   { io.WriteString(f, redacted) }
func (Secret) LogValue() slog.Value         { return slog.StringValue(redacted) }
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// TLSConfig returns the client TLS configuration of the section, or nil
// when TLS is off. Its errors name the field and the file, never the
// contents.
func (t TLS) TLSConfig() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	var errs []error
	if t.CAFile != "" {
		pool, err := loadCAs(t.CAFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("ca_file: %w", err))
		}
		c.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, errors.New("cert_file: set together with key_file (both or neither)"))
	} else if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("cert_file: %s and key_file %s: %w", t.CertFile, t.KeyFile, err))
		}
		c.Certificates = []tls.Certificate{cert}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// loadCAs reads a PEM bundle that must hold at least one certificate.
func loadCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in the file", path)
	}
	return pool, nil
}

// Secret returns the password: Password, or the contents of PasswordFile
// without one trailing line break.
func (s SASL) Secret() (Secret, error) {
	if s.PasswordFile == "" {
		return s.Password, nil
	}
	b, err := os.ReadFile(s.PasswordFile)
	if err != nil {
		return "", err
	}
	p := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if p == "" {
		return "", fmt.Errorf("%s: the file is empty", s.PasswordFile)
	}
	return Secret(p), nil
}

// resolveSecurityFiles makes the section's file paths relative to the
// config file, as partitions_file is.
func (k *Kafka) resolveSecurityFiles(configPath string) {
	for _, p := range []*string{&k.TLS.CAFile, &k.TLS.CertFile, &k.TLS.KeyFile, &k.SASL.PasswordFile} {
		if *p != "" {
			*p = resolve(configPath, *p)
		}
	}
}

func (k *Kafka) validateSecurity(v *validator) {
	t := k.TLS
	if !t.Enabled {
		if t != (TLS{}) {
			v.addf("kafka.tls.enabled", "is false but other tls fields are set: set enabled: true, or remove them")
		}
	} else if _, err := t.TLSConfig(); err != nil {
		for _, e := range unjoin(err) {
			field, msg, _ := strings.Cut(e.Error(), ": ")
			v.addf("kafka.tls."+field, "%s", msg)
		}
	}
	s := k.SASL
	if s.Mechanism == "" {
		if s != (SASL{}) {
			v.addf("kafka.sasl.mechanism", "required when username, password or password_file is set: one of %s, %s, %s", SASLPlain, SASLSCRAMSHA256, SASLSCRAMSHA512)
		}
		return
	}
	v.oneOf("kafka.sasl.mechanism", s.Mechanism, SASLPlain, SASLSCRAMSHA256, SASLSCRAMSHA512)
	if s.Username == "" {
		v.addf("kafka.sasl.username", "required with mechanism %s", s.Mechanism)
	}
	switch {
	case s.Password != "" && s.PasswordFile != "":
		v.addf("kafka.sasl.password_file", "set password or password_file, not both")
	case s.Password == "" && s.PasswordFile == "":
		v.addf("kafka.sasl.password", "required with mechanism %s: set password (e.g. \"${KAFKA_PASSWORD}\") or password_file", s.Mechanism)
	default:
		if _, err := s.Secret(); err != nil {
			v.addf("kafka.sasl.password_file", "%v", err)
		}
	}
}

// unjoin returns the errors an errors.Join put together, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
