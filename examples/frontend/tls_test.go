package frontend

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/peerid/peeridtest"
)

// TestCertificatesNameTheMember: the public TLS helpers load a member's
// files, give server and client configurations that require and present
// the member certificate, and read the member id from its URI SAN; a
// partial set of files is refused.
func TestCertificatesNameTheMember(t *testing.T) {
	ca := peeridtest.NewCA(t, "ca")
	p := ca.WriteMember(filepath.Join(t.TempDir(), "7"), "member", 7)
	certs, err := LoadCertificates(p.Cert, p.Key, p.CA)
	require.NoError(t, err)
	require.NoError(t, certs.Err())
	require.NotNil(t, certs.ServerConfig().GetConfigForClient)
	require.NotNil(t, certs.ClientConfig().GetClientCertificate)

	raw, err := os.ReadFile(p.Cert)
	require.NoError(t, err)
	block, _ := pem.Decode(raw)
	require.NotNil(t, block)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	id, err := MemberOfCert(cert)
	require.NoError(t, err)
	require.Equal(t, uint64(7), id)
	require.Equal(t, "metatree://node/7", MemberURI(7).String())

	cert.URIs = nil
	_, err = MemberOfCert(cert)
	require.ErrorIs(t, err, ErrNotMember)

	_, err = LoadCertificates(p.Cert, "", p.CA)
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = LoadCertificates(p.Cert, p.Cert, p.CA)
	require.Error(t, err, "a certificate is not a key")
}
