package peeridtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metatree/metatree/internal/peerid"
)

// CA is a certificate authority made for one test.
type CA struct {
	t      testing.TB
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	PEM    []byte
	serial atomic.Int64
}

// NewCA returns a fresh CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{t: t, cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.serial.Store(1)
	return ca
}

// Pool returns a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Member returns a certificate and key (PEM) for member id (0: a
// certificate that names no member), valid for 127.0.0.1 and localhost,
// for both server and client use.
func (ca *CA) Member(id uint64) (certPEM, keyPEM []byte) {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("member-%d", id)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	if id != 0 {
		tmpl.URIs = []*url.URL{peerid.URI(id)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// KeyPair returns member id's certificate as a tls.Certificate.
func (ca *CA) KeyPair(id uint64) tls.Certificate {
	ca.t.Helper()
	c, k := ca.Member(id)
	kp, err := tls.X509KeyPair(c, k)
	if err != nil {
		ca.t.Fatal(err)
	}
	return kp
}

// Paths are the three files a member's TLS flags name.
type Paths struct{ Cert, Key, CA string }

// WriteMember writes member id's certificate, key and the CA under dir
// (created if needed) as <name>.crt, <name>.key and ca.crt, replacing
// files there (a rotation), and returns their paths.
func (ca *CA) WriteMember(dir, name string, id uint64) Paths {
	ca.t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		ca.t.Fatal(err)
	}
	c, k := ca.Member(id)
	p := Paths{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, "ca.crt")}
	for file, data := range map[string][]byte{p.Cert: c, p.Key: k, p.CA: ca.PEM} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			ca.t.Fatal(err)
		}
	}
	return p
}
