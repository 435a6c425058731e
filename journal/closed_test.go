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
