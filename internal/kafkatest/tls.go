package kafkatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a certificate authority made for one test, with a broker
// certificate for the loopback address and a client certificate, both
// signed by it. The PEM files are in a temporary directory, for configs
// that name them.
type PKI struct {
	CAFile   string // the authority's certificate
	CertFile string // the client certificate
	KeyFile  string // the client's private key
	// Server is the broker side (kfake.TLS): it presents the broker
	// certificate and requires a client certificate signed by the CA.
	Server *tls.Config
	// Client is the independent client's side (kgo.DialTLSConfig): it
	// trusts the CA and presents the client certificate.
	Client *tls.Config
}

// NewPKI makes a new authority and its two certificates. Certificates of
// two PKIs do not verify against each other.
func NewPKI(tb testing.TB) *PKI {
	tb.Helper()
	dir := tb.TempDir()
	caKey, caDER := issue(tb, nil, nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "dedupstream test CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	})
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srvKey, srvDER := issue(tb, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "broker"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	cliKey, cliDER := issue(tb, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "dedupstream"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	p := &PKI{
		CAFile:   writePEM(tb, dir, "ca.pem", "CERTIFICATE", caDER),
		CertFile: writePEM(tb, dir, "client.pem", "CERTIFICATE", cliDER),
		KeyFile:  writePEM(tb, dir, "client-key.pem", "PRIVATE KEY", marshalKey(tb, cliKey)),
	}
	p.Server = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}
	p.Client = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS12,
	}
	return p
}

// issue makes a key and a certificate from tmpl signed by parent, or
// self-signed when parent is nil; valid for an hour either side of now.
func issue(tb testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (*ecdsa.PrivateKey, []byte) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, big.NewInt(1<<62)); err != nil {
		tb.Fatal(err)
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		tb.Fatal(err)
	}
	return key, der
}

func marshalKey(tb testing.TB, key *ecdsa.PrivateKey) []byte {
	tb.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return der
}

func writePEM(tb testing.TB, dir, name, typ string, der []byte) string {
	tb.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}
