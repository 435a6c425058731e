package image

import (
	"context"
	"crypto/tls"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/peerid"
	"github.com/metatree/metatree/internal/peerid/peeridtest"
)

// TestFetchOverMutualTLS: a Store with a TLS configuration fetches over
// https with its member certificate; a request without a client
// certificate is refused, however right its token.
func TestFetchOverMutualTLS(t *testing.T) {
	ca := peeridtest.NewCA(t, "ca")
	files := func(id uint64) *peerid.Files {
		p := ca.WriteMember(t.TempDir(), "m", id)
		f, err := peerid.LoadFiles(p.Cert, p.Key, p.CA)
		require.NoError(t, err)
		return f
	}
	srcFiles := files(1)
	src := openStore(t, vfs.NewMem(), "/src", newKV(), func(c *Config) { c.TLS = srcFiles.ClientConfig() })
	writeKV(t, src, 40)
	srv := httptest.NewUnstartedServer(src.Handler())
	srv.TLS = srcFiles.ServerConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "https://")

	dst := openStore(t, vfs.NewMem(), "/dst", newKV(), func(c *Config) { c.TLS = files(2).ClientConfig() })
	require.NoError(t, dst.Fetch(context.Background(), addr, 40))

	// Server verified, no client certificate: refused.
	noCert := openStore(t, vfs.NewMem(), "/nocert", newKV(), func(c *Config) { c.TLS = &tls.Config{RootCAs: ca.Pool()} })
	_, err := noCert.RemoteLatest(context.Background(), addr)
	require.ErrorIs(t, err, ErrUnauthorized)
	require.ErrorContains(t, err, "member certificate")
	// Plain HTTP to the TLS port gets no image either.
	plain := openStore(t, vfs.NewMem(), "/plain", newKV())
	_, err = plain.RemoteLatest(context.Background(), addr)
	require.Error(t, err)
}
