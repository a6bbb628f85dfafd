// Package kafkaauth turns the kafka.tls and kafka.sasl config sections into
// the TLS configuration and SASL mechanism of kafka-go, which the job puts
// on its Transport and on its consumer group's Dialer alike, so that every
// connection it opens to the brokers is encrypted and authenticated the
// same way.
package kafkaauth

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/dedupstream/dedupstream/config"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Auth is how connections to the brokers are secured. A nil field leaves
// that layer off.
type Auth struct {
	TLS  *tls.Config
	SASL sasl.Mechanism
}

// New reads the files the sections name (CA bundle, client key pair,
// password file) and builds Auth. Its errors name the field and the file,
// never a secret.
func New(k config.Kafka) (Auth, error) {
	var a Auth
	var err error
	if a.TLS, err = k.TLS.TLSConfig(); err != nil {
		return Auth{}, fmt.Errorf("kafka.tls: %w", err)
	}
	if a.SASL, err = Mechanism(k.SASL); err != nil {
		return Auth{}, fmt.Errorf("kafka.sasl: %w", err)
	}
	return a, nil
}

// Mechanism returns the SASL mechanism of s, or nil when s names none.
func Mechanism(s config.SASL) (sasl.Mechanism, error) {
	if s.Mechanism == "" {
		return nil, nil
	}
	pass, err := s.Secret()
	if err != nil {
		return nil, fmt.Errorf("password_file: %w", err)
	}
	switch s.Mechanism {
	case config.SASLPlain:
		return plain.Mechanism{Username: s.Username, Password: pass.Reveal()}, nil
	case config.SASLSCRAMSHA256:
		return scramMechanism(scram.SHA256, s.Username, pass)
	case config.SASLSCRAMSHA512:
		return scramMechanism(scram.SHA512, s.Username, pass)
	}
	return nil, fmt.Errorf("mechanism: want %s, %s or %s, got %q", config.SASLPlain, config.SASLSCRAMSHA256, config.SASLSCRAMSHA512, s.Mechanism)
}

// scramMechanism builds a SCRAM mechanism; the library's error (a user name
// or password that SASLprep rejects) may quote its input, so it is
// replaced rather than wrapped.
func scramMechanism(algo scram.Algorithm, user string, pass config.Secret) (sasl.Mechanism, error) {
	m, err := scram.Mechanism(algo, user, pass.Reveal())
	if err != nil {
		return nil, errors.New("username or password: not valid for SCRAM (SASLprep rejects it)")
	}
	return m, nil
}
