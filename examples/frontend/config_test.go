package frontend_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/journal"
)

// TestZeroConfigTakesDocumentedDefaults: a zero Config's effective values
// are the defaults its field comments name, the parts' own where it says
// so; required fields, Listen and Role stay unset.
func TestZeroConfigTakesDocumentedDefaults(t *testing.T) {
	c := frontend.Config{}.WithDefaults()
	require.Equal(t, time.Second, c.HeartbeatInterval)
	require.Equal(t, 3, c.DeadAfter)
	require.Equal(t, 30*time.Second, c.StaleAfter)
	require.Equal(t, uint64(100_000), c.CheckpointEntries)
	require.Equal(t, 60*time.Second, c.CheckpointInterval)
	jd := journal.Config{}.WithDefaults()
	require.Equal(t, jd.CompactMargin, c.CompactMargin, "the journal's")
	require.Equal(t, jd.PromoteMaxLag, c.PromoteMaxLag, "the journal's")
	require.Equal(t, int64(64<<20), c.ReserveBytes, "the journal's, 64 MiB")
	require.Equal(t, 10*time.Second, c.RequestTimeout)
	require.Equal(t, frontend.DefaultRequestTimeout, c.RequestTimeout)
	require.NotNil(t, c.Logger)
	require.Zero(t, c.ID)
	require.Empty(t, c.Dir)
	require.Empty(t, c.Addr)
	require.Empty(t, c.Listen, "an empty Listen binds Addr")
	require.Equal(t, journal.RoleUnset, c.Role)
}

// TestWithDefaultsKeepsSetValues: set tunables, a negative ReserveBytes
// (no guard) included, are kept.
func TestWithDefaultsKeepsSetValues(t *testing.T) {
	in := frontend.Config{HeartbeatInterval: 2 * time.Second, DeadAfter: 5, StaleAfter: time.Minute,
		CheckpointEntries: 7, CheckpointInterval: time.Hour, CompactMargin: 30_000, PromoteMaxLag: 9,
		ReserveBytes: -1, RequestTimeout: time.Second}
	c := in.WithDefaults()
	c.Logger = nil
	require.Equal(t, in, c)
}
