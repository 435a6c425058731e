package journal_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// TestReadsAfterCloseWrapErrClosed: every read of a closed journal's log
// fails with the journal's own ErrClosed, not a store's private sentinel a
// caller cannot name.
func TestReadsAfterCloseWrapErrClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1})
		ctx := ctxFor(t, time.Minute)
		idx := proposeVia(ctx, t, c.Node(1), "v")
		j := c.Node(1).Journal()
		require.NoError(t, c.Stop(1))

		_, err := j.TermAt(idx)
		require.ErrorIs(t, err, journal.ErrClosed, "TermAt")
		err = j.ReadEntries(ctx, 0, idx, func(uint64, []byte) error { return nil })
		require.ErrorIs(t, err, journal.ErrClosed, "ReadEntries")
		_, err = j.FirstIndex()
		require.ErrorIs(t, err, journal.ErrClosed, "FirstIndex")
		_, err = journal.ImageLogOf(j).MembershipAt(idx)
		require.ErrorIs(t, err, journal.ErrClosed, "MembershipAt")
	})
}

// TestCloseIsIdempotentAndFailsCalls: Close twice returns nil both times;
// afterwards writes, barriers, waits and membership changes fail with
// ErrClosed; the data dir is free again, and the reopened node holds the
// write made before.
func TestCloseIsIdempotentAndFailsCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1})
		ctx := ctxFor(t, time.Minute)
		proposeVia(ctx, t, c.Node(1), "a")
		j := c.Node(1).Journal()
		require.NoError(t, c.Stop(1))
		require.NoError(t, j.Close(), "a second Close")
		_, _, err := j.Propose(ctx, []byte("b"))
		require.ErrorIs(t, err, journal.ErrClosed)
		require.ErrorIs(t, j.ReadBarrier(ctx), journal.ErrClosed)
		require.ErrorIs(t, j.WaitApplied(ctx, 1<<40), journal.ErrClosed)
		require.ErrorIs(t, j.AddMember(ctx, 9, "node9", journal.Observer), journal.ErrClosed)

		require.NoError(t, c.Restart(ctx, 1))
		require.NoError(t, c.Node(1).Journal().ReadBarrier(ctx))
		require.True(t, applied(c.Node(1), "a"), "the reopened node replayed the write")
	})
}
