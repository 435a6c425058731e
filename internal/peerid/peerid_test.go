package peerid_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/peerid"
	"github.com/metatree/metatree/internal/peerid/peeridtest"
)

func TestFromCert(t *testing.T) {
	u := func(s string) *url.URL {
		p, err := url.Parse(s)
		require.NoError(t, err)
		return p
	}
	cases := []struct {
		name string
		uris []*url.URL
		want uint64
		err  error
	}{
		{"member", []*url.URL{peerid.URI(7)}, 7, nil},
		{"parsed", []*url.URL{u("metatree://node/12")}, 12, nil},
		{"other URIs ignored", []*url.URL{u("spiffe://x/y"), peerid.URI(3)}, 3, nil},
		{"same id twice", []*url.URL{peerid.URI(3), peerid.URI(3)}, 3, nil},
		{"none", nil, 0, peerid.ErrNotMember},
		{"two members", []*url.URL{peerid.URI(3), peerid.URI(4)}, 0, peerid.ErrNotMember},
		{"zero", []*url.URL{u("metatree://node/0")}, 0, peerid.ErrNotMember},
		{"not a number", []*url.URL{u("metatree://node/x1")}, 0, peerid.ErrNotMember},
		{"sign", []*url.URL{u("metatree://node/+1")}, 0, peerid.ErrNotMember},
		{"extra path", []*url.URL{u("metatree://node/1/2")}, 0, peerid.ErrNotMember},
		{"query", []*url.URL{u("metatree://node/1?x=2")}, 0, peerid.ErrNotMember},
		{"user", []*url.URL{u("metatree://bob@node/1")}, 0, peerid.ErrNotMember},
		{"empty", []*url.URL{u("metatree://node")}, 0, peerid.ErrNotMember},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := peerid.FromCert(&x509.Certificate{URIs: tc.uris})
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, id)
		})
	}
}

func TestCheck(t *testing.T) {
	ca := peeridtest.NewCA(t, "ca")
	c2 := ca.KeyPair(2)
	noID := ca.KeyPair(0)
	withCert := func(kp tls.Certificate) *tls.ConnectionState {
		return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{kp.Leaf}}, PeerCertificates: []*x509.Certificate{kp.Leaf}}
	}
	cases := []struct {
		name     string
		cs       *tls.ConnectionState
		claimed  uint64
		required bool
		err      error
	}{
		{"plain, not required", nil, 2, false, nil},
		{"plain, required", nil, 2, true, peerid.ErrNoCertificate},
		{"TLS without a client cert, required", &tls.ConnectionState{}, 2, true, peerid.ErrNoCertificate},
		{"own cert", withCert(c2), 2, true, nil},
		{"own cert, not required", withCert(c2), 2, false, nil},
		{"speaks for another", withCert(c2), 3, true, peerid.ErrWrongMember},
		{"speaks for another, not required", withCert(c2), 3, false, peerid.ErrWrongMember},
		{"cert names no member", withCert(noID), 2, true, peerid.ErrNotMember},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/raft/stream", nil)
			r.TLS = tc.cs
			err := peerid.Check(r, tc.claimed, tc.required)
			if tc.err == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.err)
			}
		})
	}
}

func TestLoadFilesErrors(t *testing.T) {
	ca := peeridtest.NewCA(t, "ca")
	dir := t.TempDir()
	p := ca.WriteMember(dir, "m1", 1)
	_, err := peerid.LoadFiles(p.Cert, p.Key, dir+"/missing.crt")
	require.ErrorContains(t, err, "missing.crt")
	require.NoError(t, os.WriteFile(dir+"/bad-ca.crt", []byte("not pem"), 0o600))
	_, err = peerid.LoadFiles(p.Cert, p.Key, dir+"/bad-ca.crt")
	require.ErrorContains(t, err, "bad-ca.crt holds no PEM certificate")
	other := ca.WriteMember(t.TempDir(), "m2", 2)
	_, err = peerid.LoadFiles(p.Cert, other.Key, p.CA)
	require.ErrorContains(t, err, p.Cert)
}

// TestFilesRotate serves with one certificate, rewrites the files with
// another, and checks the next handshake presents the new one; a rotation
// caught half written keeps the old one in use.
func TestFilesRotate(t *testing.T) {
	ca := peeridtest.NewCA(t, "ca")
	dir := t.TempDir()
	p := ca.WriteMember(dir, "srv", 1)
	srvFiles, err := peerid.LoadFiles(p.Cert, p.Key, p.CA)
	require.NoError(t, err)
	cp := ca.WriteMember(t.TempDir(), "cli", 2)
	cliFiles, err := peerid.LoadFiles(cp.Cert, cp.Key, cp.CA)
	require.NoError(t, err)

	srv := httptest.NewUnstartedServer(nil)
	srv.TLS = srvFiles.ServerConfig()
	srv.StartTLS()
	defer srv.Close()

	serial := func() int64 {
		cfg := cliFiles.ClientConfig()
		cfg.ServerName = "127.0.0.1"
		conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), cfg)
		require.NoError(t, err)
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	first := serial()
	ca.WriteMember(dir, "srv", 1)
	second := serial()
	require.NotEqual(t, first, second, "the rotated certificate is served without a restart")

	// Half a rotation: a certificate whose key is not on disk yet.
	c, _ := ca.Member(1)
	require.NoError(t, os.WriteFile(p.Cert, c, 0o600))
	require.Equal(t, second, serial(), "the last good certificate stays in use")
	require.Error(t, srvFiles.Err())
}

// TestFilesRefuseOtherCA: a client certificate from another CA fails the
// handshake, and so does a server certificate from another CA.
func TestFilesRefuseOtherCA(t *testing.T) {
	ca, other := peeridtest.NewCA(t, "ca"), peeridtest.NewCA(t, "other")
	load := func(ca *peeridtest.CA, id uint64) *peerid.Files {
		p := ca.WriteMember(t.TempDir(), "m", id)
		f, err := peerid.LoadFiles(p.Cert, p.Key, p.CA)
		require.NoError(t, err)
		return f
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.TLS = load(ca, 1).ServerConfig()
	srv.StartTLS()
	defer srv.Close()
	dial := func(f *peerid.Files) error {
		cli := &http.Client{Transport: &http.Transport{TLSClientConfig: f.ClientConfig()}}
		defer cli.CloseIdleConnections()
		resp, err := cli.Get(srv.URL)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	require.NoError(t, dial(load(ca, 2)), "a member of the CA is let in")
	err := dial(load(other, 2))
	require.Error(t, err)
	require.ErrorContains(t, err, "certificate", "another CA's client certificate is refused")

	osrv := httptest.NewUnstartedServer(nil)
	osrv.TLS = load(other, 1).ServerConfig()
	osrv.StartTLS()
	defer osrv.Close()
	cfg := load(ca, 2).ClientConfig()
	cfg.ServerName = "127.0.0.1"
	_, err = tls.Dial("tcp", osrv.Listener.Addr().String(), cfg)
	require.ErrorContains(t, err, "peerid: server certificate", "a server certificate from another CA is refused")
}
