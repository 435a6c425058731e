package journal_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// TestHostHaltStopsWrites: a host that saw a storage failure of its own on
// the same disk (an image fsync) halts the journal: writes fail with
// ErrHalted and the cause, reads go on, Close returns, a restart takes
// writes again.
func TestHostHaltStopsWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, Configure: func(cfg *journal.Config) {
			cfg.StaleAfter = 10 * time.Second // fresh throughout
		}})
		ctx := ctxFor(t, time.Minute)
		n := c.Node(1)
		proposeVia(ctx, t, n, "a")

		cause := errors.New("image: sync /data/image/image.ckpt: input/output error")
		n.Journal().Halt(cause)
		_, _, err := n.Journal().Propose(ctx, []byte("b"))
		require.ErrorIs(t, err, journal.ErrHalted)
		require.ErrorIs(t, err, cause)
		require.ErrorIs(t, n.Journal().Status().Err, journal.ErrHalted)
		require.NoError(t, n.Journal().CheckFresh())

		require.NoError(t, c.Stop(1))
		require.NoError(t, c.Restart(ctx, 1))
		require.NoError(t, n.Journal().ReadBarrier(ctx))
		require.True(t, applied(n, "a"), "the restarted node replayed the write")
		proposeVia(ctx, t, n, "c")
	})
}
