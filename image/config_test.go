package image_test

import (
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/image"
)

// TestZeroConfigTakesDocumentedDefaults: a zero Config's effective values
// are the defaults its field comments state; the required fields stay
// zero.
func TestZeroConfigTakesDocumentedDefaults(t *testing.T) {
	c := image.Config{}.WithDefaults()
	require.Equal(t, vfs.Default, c.FS)
	require.Equal(t, 2, c.Keep)
	require.NotNil(t, c.HTTPClient)
	require.Zero(t, c.HTTPClient.Timeout, "no overall timeout: fetches are bounded by their context and FetchIdleTimeout")
	require.Equal(t, 30*time.Second, c.FetchIdleTimeout)
	require.Equal(t, int64(1<<40), c.MaxImageBytes, "1 TiB")
	require.Equal(t, int64(256<<20), c.DeleteBytesPerSec, "256 MiB/s")
	require.NotNil(t, c.Logger)
	require.Empty(t, c.Dir)
	require.Nil(t, c.State)
	require.Nil(t, c.TLS)
}

// TestWithDefaultsDialsPeersWithTheConfiguredTLS: with TLS and no
// HTTPClient, the default client fetches over that TLS configuration.
func TestWithDefaultsDialsPeersWithTheConfiguredTLS(t *testing.T) {
	tc := &tls.Config{ServerName: "member"}
	c := image.Config{TLS: tc}.WithDefaults()
	tr, ok := c.HTTPClient.Transport.(*http.Transport)
	require.True(t, ok, "transport is %T", c.HTTPClient.Transport)
	require.Same(t, tc, tr.TLSClientConfig)
}

// TestZeroCheckpointerConfigTakesDocumentedDefaults: a zero
// CheckpointerConfig checkpoints every 100,000 entries, checked every 60 s.
func TestZeroCheckpointerConfigTakesDocumentedDefaults(t *testing.T) {
	c := image.CheckpointerConfig{}.WithDefaults()
	require.Equal(t, uint64(100_000), c.Threshold)
	require.Equal(t, 60*time.Second, c.Interval)
	require.NotNil(t, c.Clock)
	require.NotNil(t, c.Logger)
	require.Nil(t, c.Store)
	require.Nil(t, c.Journal)
}
