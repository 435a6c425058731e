package journal_test

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// TestStatusReportsTypedLeaderState: a leader's Status says StateLeader and
// IsLeader agrees.
func TestStatusReportsTypedLeaderState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1})
		st := c.Node(1).Journal().Status()
		require.Equal(t, journal.StateLeader, st.State)
		require.True(t, st.IsLeader())
	})
}
