package peerid_test

import (
	"crypto/x509"
	"errors"
	"net/url"
	"testing"

	"github.com/metatree/metatree/internal/peerid"
)

// FuzzFromCert: any URI SAN gives a member id that round-trips through
// URI, or ErrNotMember; never a panic, never id 0.
func FuzzFromCert(f *testing.F) {
	for _, s := range []string{"metatree://node/7", "metatree://node/0", "metatree://node/", "metatree://node/1/2", "spiffe://a/b", "metatree://node/18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		id, err := peerid.FromCert(&x509.Certificate{URIs: []*url.URL{u}})
		if err != nil {
			if !errors.Is(err, peerid.ErrNotMember) {
				t.Fatalf("%q: %v is not ErrNotMember", s, err)
			}
			return
		}
		if id == 0 {
			t.Fatalf("%q: id 0 accepted", s)
		}
		again, err := peerid.FromCert(&x509.Certificate{URIs: []*url.URL{peerid.URI(id)}})
		if err != nil || again != id {
			t.Fatalf("%q: id %d does not round-trip: %d, %v", s, id, again, err)
		}
	})
}
