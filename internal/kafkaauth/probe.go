package kafkaauth

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/segmentio/kafka-go"
)

// RefusedError is a broker's refusal of a connection's TLS or SASL.
type RefusedError struct {
	Broker string
	Layer  string // "TLS" or "SASL <mechanism>"
	Err    error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("broker %s refused %s: %v", e.Broker, e.Layer, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// Probe tells a refusal of d's TLS or SASL apart from a broker that is
// down. A broker refusing SASL credentials may just close the connection,
// which looks like any other lost connection; so Probe first connects with
// TLS alone and sends a request, then connects again with SASL too: when
// only the second fails, and it fails by the broker ending the exchange,
// the credentials were refused. It returns a *RefusedError for a refusal,
// and nil when the connections succeed or say nothing about the
// security (the broker is unreachable).
func Probe(ctx context.Context, d *kafka.Dialer, addr string) error {
	if d.TLS == nil && d.SASLMechanism == nil {
		return nil // nothing to refuse
	}
	tlsOnly := *d
	tlsOnly.SASLMechanism = nil
	c, err := tlsOnly.DialContext(ctx, "tcp", addr)
	if err == nil {
		// With TLS 1.3 the broker judges the client certificate after
		// the handshake: its verdict arrives with the first answer. The
		// connection has no deadline of its own.
		if dl, ok := ctx.Deadline(); ok {
			c.SetDeadline(dl)
		}
		_, err = c.ApiVersions()
		c.Close()
	}
	if err != nil {
		if d.TLS != nil && tlsRefused(err) {
			return &RefusedError{Broker: addr, Layer: "TLS", Err: err}
		}
		return nil
	}
	if d.SASLMechanism == nil {
		return nil
	}
	c, err = d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return nil
	}
	if saslRefused(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return &RefusedError{Broker: addr, Layer: "SASL " + d.SASLMechanism.Name(), Err: err}
	}
	return nil
}

// Refused reports whether err, from any request, is a broker's refusal of
// the connection's security in itself: a SASL error code or a failed TLS
// handshake. A broker that only closes the connection needs Probe.
func Refused(err error) bool {
	return saslRefused(err) || tlsRefused(err)
}

func saslRefused(err error) bool {
	return errors.Is(err, kafka.SASLAuthenticationFailed) || errors.Is(err, kafka.UnsupportedSASLMechanism) ||
		errors.Is(err, kafka.IllegalSASLState)
}

// tlsRefused: the broker's certificate failed verification, the peer does
// not speak TLS, or the broker sent an alert (it rejected the client
// certificate); crypto/tls reports received alerts as a net.OpError with
// Op "remote error".
func tlsRefused(err error) bool {
	var (
		verify *tls.CertificateVerificationError
		record tls.RecordHeaderError
		alert  tls.AlertError
		op     *net.OpError
	)
	return errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert) ||
		(errors.As(err, &op) && op.Op == "remote error")
}
