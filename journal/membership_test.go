package journal_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// With one of three voters cut off, removing another would leave no
// reachable quorum: refused (through the observer, with the leader's
// reason said once). The cut-off voter is then removed, the observer
// promoted and handed the leadership. Healed, the removed voter campaigns,
// the members refuse it, it learns of its removal from the refusals and
// stops campaigning; its id cannot come back.
func TestMembership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Observers: 1})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		lj := c.Node(leader).Journal()
		var others []uint64
		for id := uint64(1); id <= 3; id++ {
			if id != leader {
				others = append(others, id)
			}
		}
		down, up := others[0], others[1]
		uj := c.Node(up).Journal()

		c.Net.Isolate(down)
		awaitTicks(t, 2*bubbleElectionTicks, "the leader counts the cut-off voter unreachable", func() bool {
			ok, err := lj.ReachableForTest(ctx, down)
			require.NoError(t, err)
			return !ok
		})
		err = c.Node(4).Journal().RemoveMember(ctx, up, false) // through the observer
		require.ErrorIs(t, err, journal.ErrUnsafeRemoval)
		require.Equal(t, 1, strings.Count(err.Error(), "unsafe member removal"), "the leader's reason, said once: %v", err)
		require.ErrorContains(t, err, "below a quorum")
		require.NoError(t, uj.RemoveMember(ctx, down, false))

		// Promote the observer (through a follower), then hand it the
		// leadership.
		require.NoError(t, uj.Promote(ctx, 4))
		// Promote returns once the change is applied on the calling node;
		// the observer's role changes before its applied index passes it.
		oj := c.Node(4).Journal()
		require.NoError(t, oj.WaitApplied(ctx, uj.Status().Applied))
		require.Equal(t, journal.Follower, oj.Status().Role, "ROLE updated")
		require.NoError(t, lj.TransferLeadership(ctx, 4))
		awaitTicks(t, 2*bubbleElectionTicks, "node 4 leads", func() bool {
			return oj.Status().IsLeader() && uj.Status().Leader == 4 && lj.Status().Leader == 4
		})
		_, _, err = uj.Propose(ctx, []byte("after-transfer"))
		require.NoError(t, err)
		refused := oj.RefusedRemovedForTest() + uj.RefusedRemovedForTest()

		// The removed node never received its removal: healed, it
		// campaigns, the others refuse it, and their refusals tell it it
		// was removed.
		c.Net.Heal()
		dj := c.Node(down).Journal()
		camp := dj.CampaignsForTest()
		awaitTicks(t, 5*bubbleElectionTicks, "the removed node campaigns", func() bool { return dj.CampaignsForTest() > camp })
		_, _, err = uj.Propose(ctx, []byte("after-removal"))
		require.NoError(t, err)
		st := oj.Status()
		require.NotEqual(t, down, st.Leader, "the removed node never leads")
		awaitTicks(t, 5*bubbleElectionTicks, "the removed node's vote requests are refused", func() bool {
			return oj.RefusedRemovedForTest()+uj.RefusedRemovedForTest() > refused
		})
		for _, id := range []uint64{leader, up, 4} {
			require.NotEqual(t, down, c.Node(id).Journal().Status().Leader)
		}
		require.False(t, applied(c.Node(down), "after-removal"))
		require.False(t, oj.Status().Removed)
		awaitTicks(t, 5*bubbleElectionTicks, "the removed node learns of its removal from the refusals", func() bool { return dj.Status().Removed })
		require.ErrorIs(t, dj.ReadBarrier(ctx), journal.ErrRemoved)
		// Knowing it, it stops its raft clock, and so campaigning: three
		// election timeouts later, it has not campaigned.
		camp, term := dj.CampaignsForTest(), dj.Status().Term
		afterTicks(3 * bubbleElectionTicks)
		require.Equal(t, camp, dj.CampaignsForTest(), "campaigns after it learned of its removal")
		require.Equal(t, term, dj.Status().Term)
		// Removed ids cannot come back.
		require.ErrorIs(t, uj.AddMember(ctx, down, c.Node(down).Addr, journal.Follower), journal.ErrUnknownMember)
		for _, m := range st.Members {
			require.NotEqual(t, down, m.ID)
		}
	})
}
