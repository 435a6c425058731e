package peerid

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Scheme and host of the URI SAN that names a member:
// metatree://node/<id>.
const (
	uriScheme = "metatree"
	uriHost   = "node"
)

var (
	// ErrNoCertificate is a request that carries no client certificate
	// verified against the CA.
	ErrNoCertificate = errors.New("peerid: no verified client certificate")
	// ErrNotMember is a verified certificate that names no member, or names
	// more than one.
	ErrNotMember = errors.New("peerid: certificate names no member")
	// ErrWrongMember: a verified member certificate that speaks for
	// another member.
	ErrWrongMember = errors.New("peerid: certificate of another member")
)

// URI returns the URI SAN that names member id.
func URI(id uint64) *url.URL {
	return &url.URL{Scheme: uriScheme, Host: uriHost, Path: "/" + strconv.FormatUint(id, 10)}
}

// FromCert returns the member id a certificate names: exactly one URI SAN
// metatree://node/<id> with a non-zero decimal id.
func FromCert(c *x509.Certificate) (uint64, error) {
	var id uint64
	for _, u := range c.URIs {
		if u.Scheme != uriScheme || u.Host != uriHost {
			continue
		}
		digits, ok := strings.CutPrefix(u.Path, "/")
		n, err := strconv.ParseUint(digits, 10, 64)
		if !ok || err != nil || n == 0 || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return 0, fmt.Errorf("%w: bad member URI %q", ErrNotMember, u.String())
		}
		if id != 0 && id != n {
			return 0, fmt.Errorf("%w: it names members %d and %d", ErrNotMember, id, n)
		}
		id = n
	}
	if id == 0 {
		return 0, fmt.Errorf("%w (%q has no %s://%s/<id> URI)", ErrNotMember, c.Subject.CommonName, uriScheme, uriHost)
	}
	return id, nil
}

// Verified reports whether the connection presented a client certificate
// that the server verified against its CA.
func Verified(cs *tls.ConnectionState) bool {
	return cs != nil && len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0
}

// FromRequest returns the member id named by the request's verified client
// certificate: ErrNoCertificate when there is none, ErrNotMember when it
// names no member.
func FromRequest(r *http.Request) (uint64, error) {
	if !Verified(r.TLS) {
		return 0, ErrNoCertificate
	}
	return FromCert(r.TLS.VerifiedChains[0][0])
}

// Check is the rule every member endpoint applies to a request that claims
// to come from member claimed: a verified certificate, when the request
// has one, must name claimed; without one the request passes only when
// certificates are not required.
func Check(r *http.Request, claimed uint64, required bool) error {
	if !Verified(r.TLS) {
		if required {
			return ErrNoCertificate
		}
		return nil
	}
	id, err := FromCert(r.TLS.VerifiedChains[0][0])
	if err != nil {
		return err
	}
	if id != claimed {
		return fmt.Errorf("%w: the certificate names member %d, the request speaks for %d", ErrWrongMember, id, claimed)
	}
	return nil
}
