package journal_test

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
)

// TestZeroConfigTakesDocumentedDefaults: the effective values of a zero
// Config are the defaults its field comments state, and the fields that
// have none (the required ones) stay zero.
func TestZeroConfigTakesDocumentedDefaults(t *testing.T) {
	c := journal.Config{}.WithDefaults()
	require.Equal(t, 100*time.Millisecond, c.TickInterval)
	require.Equal(t, 10, c.ElectionTicks)
	require.Equal(t, 1, c.HeartbeatTicks)
	require.Equal(t, uint64(1<<20), c.MaxSizePerMsg)
	require.Equal(t, 256, c.MaxInflightMsgs)
	require.Equal(t, uint64(32<<20), c.MaxInflightBytes)
	require.Equal(t, uint64(64<<20), c.MaxUncommittedBytes)
	require.Equal(t, uint64(4<<20), c.MaxCommittedBytesPerReady)
	require.Equal(t, uint64(64<<20), c.ApplyQueueBytes)
	require.Equal(t, 1024, c.ApplyQueueBatches)
	require.Equal(t, 4096, c.SendQueueMsgs)
	require.Equal(t, uint64(64<<20), c.SendQueueBytes)
	require.Equal(t, int64(4<<20+1<<20), c.MaxBodyBytes, "4 × MaxSizePerMsg + 1 MiB")
	require.Equal(t, uint64(1536<<10), c.MaxEntryBytes, "1.5 MiB")
	require.Equal(t, 4096, c.ProposalQueue)
	require.Equal(t, 30*time.Second, c.StaleAfter)
	require.Equal(t, time.Second, c.CheckInterval)
	require.Equal(t, uint64(10_000), c.DedupeWindow)
	require.Equal(t, uint64(20_000), c.CompactMargin)
	require.Equal(t, 5, c.ForwardRetries)
	require.Equal(t, uint32(journal.NewestVersion), c.MaxVersion)
	require.Equal(t, time.Second, c.SlowSync)
	require.Equal(t, 100*time.Millisecond, c.SlowApply)
	require.Equal(t, uint64(1000), c.PromoteMaxLag)
	require.Equal(t, int64(64<<20), c.ReserveBytes)
	require.Equal(t, int64(8<<20), c.BallastBytes, "ReserveBytes/8")
	require.Equal(t, time.Second, c.SpaceCheckInterval)
	require.Equal(t, "http", c.Scheme)
	require.Equal(t, vfs.Default, c.FS)
	require.NotNil(t, c.Logger)
	require.NotNil(t, c.Clock)
	// Required fields have no default.
	require.Zero(t, c.ID)
	require.Empty(t, c.Dir)
	require.Empty(t, c.Addr)
	require.Nil(t, c.StateMachine)
	require.Equal(t, journal.RoleUnset, c.Role)
}

// TestWithDefaultsKeepsSetValuesAndDerivesTheRest: a set field is kept, a
// default derived from another field follows it, and the receiver is not
// changed.
func TestWithDefaultsKeepsSetValuesAndDerivesTheRest(t *testing.T) {
	in := journal.Config{ElectionTicks: 7, MaxSizePerMsg: 2 << 20, ReserveBytes: 8 << 20, TLS: &tls.Config{}}
	c := in.WithDefaults()
	require.Equal(t, 7, c.ElectionTicks)
	require.Equal(t, int64(4*(2<<20)+1<<20), c.MaxBodyBytes)
	require.Equal(t, int64(1<<20), c.BallastBytes)
	require.Equal(t, "https", c.Scheme, "https with TLS")
	require.Zero(t, in.TickInterval, "the receiver is a copy")
}
