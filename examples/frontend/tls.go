package frontend

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/metatree/metatree/internal/peerid"
)

// The errors of a member identity check ([MemberOf], [CheckMember]).
var (
	// ErrNoCertificate is a request without a client certificate verified
	// against the cluster's CA.
	ErrNoCertificate = peerid.ErrNoCertificate
	// ErrNotMember is a verified certificate that names no member (no URI
	// SAN metatree://node/<id>), or names more than one.
	ErrNotMember = peerid.ErrNotMember
	// ErrWrongMember is a verified member certificate that speaks for
	// another member than the request claims.
	ErrWrongMember = peerid.ErrWrongMember
)

// Certificates is a member's certificate and key and the CA that signs
// every member's, read from PEM files and re-read when they change: a
// rotated certificate takes effect on the next handshake, without a
// restart. The frontend loads its own from Config.TLSCert, TLSKey and
// TLSCA; a host loads the same files for its own servers and clients
// (a worker's, say). Safe for concurrent use.
type Certificates struct {
	files *peerid.Files
}

// LoadCertificates reads a member's certificate, its key and the CA
// certificate (PEM); an error names the file that is wrong.
func LoadCertificates(certFile, keyFile, caFile string) (*Certificates, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, fmt.Errorf("%w: the certificate, the key and the CA go together", ErrInvalidConfig)
	}
	files, err := peerid.LoadFiles(certFile, keyFile, caFile)
	if err != nil {
		return nil, err
	}
	return &Certificates{files: files}, nil
}

// ServerConfig is the configuration to serve with (tls.NewListener):
// each handshake gets the current certificate and CA; a client
// certificate, when one is given, must be signed by the CA (clients of a
// host's API may come without one; member endpoints then refuse them).
func (c *Certificates) ServerConfig() *tls.Config { return c.files.ServerConfig() }

// ClientConfig is the configuration to dial members with: it presents
// the current certificate and verifies the server's against the current
// CA and the dialed host name.
func (c *Certificates) ClientConfig() *tls.Config { return c.files.ClientConfig() }

// Err returns why the files last failed to reload (the last good set
// stays in use meanwhile), or nil.
func (c *Certificates) Err() error { return c.files.Err() }

// MemberURI is the URI SAN that names member id in its certificate:
// metatree://node/<id>.
func MemberURI(id uint64) *url.URL { return peerid.URI(id) }

// MemberOfCert returns the member a certificate names (its one URI SAN
// metatree://node/<id>), or ErrNotMember.
func MemberOfCert(cert *x509.Certificate) (uint64, error) { return peerid.FromCert(cert) }

// MemberOf returns the member named by a request's verified client
// certificate: ErrNoCertificate without one, ErrNotMember when it names no
// member.
func MemberOf(r *http.Request) (uint64, error) { return peerid.FromRequest(r) }

// CheckMember is the rule the library's member endpoints apply to a
// request that claims to come from member claimed, for a host's own
// member endpoints: a verified certificate, when the request has one,
// must name claimed (else ErrWrongMember); without one the request passes
// only when certificates are not required (else ErrNoCertificate).
func CheckMember(r *http.Request, claimed uint64, required bool) error {
	return peerid.Check(r, claimed, required)
}

// loadTLS reads the TLS files the config names (nil without), and warns
// when members talk plain HTTP.
func loadTLS(cfg Config, log *slog.Logger) (*peerid.Files, error) {
	if cfg.TLSCert == "" && cfg.TLSKey == "" && cfg.TLSCA == "" {
		log.Warn("no TLS files: members talk plain HTTP; the join token alone guards the member endpoints")
		return nil, nil
	}
	certs, err := LoadCertificates(cfg.TLSCert, cfg.TLSKey, cfg.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return certs.files, nil
}
