package journal_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// A member cut off while a node joined and the leader it knew left has
// not applied the join, so its membership names no address for the new
// leader. Once the cut heals, the new leader's stream reaches it, and it
// must answer: it learns the leader's address from the stream, replies,
// and catches up (by the log here; by an image when the leader's log
// starts past it).
func TestLaggingObserverFollowsALeaderWhoseJoinItHasNotApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newHTTPBubble(t, journaltest.Options{Voters: 1, Observers: 1}) // node 1 votes, node 2 observes
		n1, n2 := c.Node(1), c.Node(2)
		proposeVia(ctxFor(t, 5*time.Second), t, n1, "before")
		awaitTicks(t, 1000, "the observer applies the first write", func() bool { return applied(n2, "before") })

		c.partition(2)
		n3, err := c.add(t, journal.Follower, nil) // joins through node 1
		require.NoError(t, err)
		// The leader counts node 3 reachable once it has heard from it;
		// until then the removal is refused as unsafe.
		awaitTicks(t, 50*bubbleElectionTicks, "node 1 removed", func() bool {
			err := n3.Journal().RemoveMember(ctxFor(t, 10*time.Second), 1, false)
			if err != nil {
				require.ErrorIs(t, err, journal.ErrUnsafeRemoval)
			}
			return err == nil
		})
		awaitTicks(t, 1000, "node 3 leads alone", func() bool { return n3.Journal().Status().Leader == 3 })
		c.stop(t, 1)
		proposeVia(ctxFor(t, 5*time.Second), t, n3, "after")
		require.False(t, n2.Journal().KnowsMemberForTest(3), "the cut-off observer knows node 3 already")

		c.heal()
		awaitTicks(t, 2000, "the observer applies the new leader's write", func() bool { return applied(n2, "after") })
		require.Equal(t, uint64(3), n2.Journal().Status().Leader)
	})
}
