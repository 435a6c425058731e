package journal_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// A reachable node that is removed learns of it: either the append that
// commits its removal reaches it (the leader drops it from the transport
// only after sending that Ready's messages, and the transport delivers what
// it had queued), so it applies the change; or, when the leader's progress
// for it was paused at that moment (a probe in flight after a leadership
// change), its next message reaches a leader that applied the removal,
// which refuses it with ErrRemoved, and the node counts itself removed.
func TestRemovedNodeLearnsOfItsRemoval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Observers: 3})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		lj := c.Node(leader).Journal()
		proposeVia(ctx, t, c.Node(leader), "x")
		for id := uint64(4); id <= 6; id++ {
			require.NoError(t, lj.RemoveMember(ctx, id, false))
			j := c.Node(id).Journal()
			awaitTicks(t, 2*bubbleElectionTicks, fmt.Sprintf("node %d learns of its removal", id), func() bool { return j.Status().Removed })
			// No member answers it any more: it says so at once.
			_, _, err := j.Propose(ctx, []byte("from-removed"))
			require.ErrorIs(t, err, journal.ErrRemoved)
			require.ErrorIs(t, j.ReadBarrier(ctx), journal.ErrRemoved)
		}
		// A voter removing itself hears its own change applied, too.
		var self uint64
		for id := uint64(1); id <= 3; id++ {
			if id != leader {
				self = id
			}
		}
		require.NoError(t, c.Node(self).Journal().RemoveMember(ctx, self, false))
		require.True(t, c.Node(self).Journal().Status().Removed)
	})
}

// A leader that removes itself commits the change, learns of it, stops
// its raft clock (removed nodes neither campaign nor heartbeat), and the
// other voters elect a leader among themselves: writes and linearizable
// reads go on there, every member applied the write made before, and the
// removed node refuses both.
func TestLeaderRemovingItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3})
		ctx := ctxFor(t, time.Minute)
		old, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		proposeVia(ctx, t, c.Node(old), "before")
		gone := c.Node(old).Journal()
		afterTicks(2) // past a heartbeat round: every follower answered one
		require.NoError(t, gone.RemoveMember(ctx, old, false))
		awaitTicks(t, 2*bubbleElectionTicks, "the old leader learns of its removal", func() bool { return gone.Status().Removed })
		var rest []uint64
		for id := uint64(1); id <= 3; id++ {
			if id != old {
				rest = append(rest, id)
			}
		}
		leader, err := c.WaitNewLeader(ctx, old)
		require.NoError(t, err)
		require.Contains(t, rest, leader)
		for _, id := range rest {
			n := c.Node(id)
			proposeVia(ctx, t, n, fmt.Sprintf("after-%d", id))
			require.NoError(t, n.Journal().ReadBarrier(ctx))
			require.True(t, applied(n, "before"), "node %d applied the write made before the removal", id)
			for _, m := range n.Journal().Status().Members {
				require.NotEqual(t, old, m.ID, "node %d still lists the removed leader", id)
			}
		}
		_, _, err = gone.Propose(ctx, []byte("from-removed"))
		require.ErrorIs(t, err, journal.ErrRemoved)
		require.ErrorIs(t, gone.ReadBarrier(ctx), journal.ErrRemoved)
		camp, term := gone.CampaignsForTest(), gone.Status().Term
		afterTicks(3 * bubbleElectionTicks)
		require.Equal(t, camp, gone.CampaignsForTest(), "campaigns after it learned of its removal")
		require.Equal(t, term, gone.Status().Term)
	})
}

// removeObserverWhileCutOff starts three voters and observer 4 (stale
// after 300 ms without a leader timestamp), cuts the observer off, removes
// it and heals the cut. It returns the cluster and
// the voters' count of refused messages from removed nodes before the cut.
func removeObserverWhileCutOff(t *testing.T) (*journaltest.Cluster, uint64) {
	c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Observers: 1, Configure: func(cfg *journal.Config) {
		cfg.StaleAfter = 300 * time.Millisecond
	}})
	ctx := ctxFor(t, time.Minute)
	leader, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	lj := c.Node(leader).Journal()
	proposeVia(ctx, t, c.Node(leader), "x")
	require.NoError(t, c.Node(4).Journal().WaitApplied(ctx, lj.Status().Applied))
	refused := refusedRemoved(c)
	c.Net.Isolate(4)
	require.NoError(t, lj.RemoveMember(ctx, 4, false))
	c.Net.Heal()
	return c, refused
}

// refusedRemoved sums the messages from removed nodes that voters 1 to 3
// refused.
func refusedRemoved(c *journaltest.Cluster) (n uint64) {
	for id := uint64(1); id <= 3; id++ {
		n += c.Node(id).Journal().RefusedRemovedForTest()
	}
	return n
}

// An observer removed while cut off hears nothing after the heal and, as
// a learner, sends nothing by itself; a linearizable read on it sends a
// ReadIndex to the member it takes for the leader, which refuses it, and
// the read fails with ErrRemoved.
func TestObserverRemovedWhileCutOffLearnsOnARead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := removeObserverWhileCutOff(t)
		obs := c.Node(4).Journal()
		require.ErrorIs(t, obs.ReadBarrier(ctxFor(t, 10*time.Second)), journal.ErrRemoved)
		require.True(t, obs.Status().Removed)
	})
}

// The same observer, asked nothing after the heal, learns of its removal
// from its own removal probe once its view goes stale (removalprobe.go):
// the member it takes for the leader refuses the probe.
func TestIdleObserverRemovedWhileCutOffLearnsFromItsProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, refused := removeObserverWhileCutOff(t)
		obs := c.Node(4).Journal()
		awaitTicks(t, 10*bubbleElectionTicks, "the idle observer learns of its removal", func() bool { return obs.Status().Removed })
		require.Greater(t, refusedRemoved(c), refused, "a member refused the probe")
		require.ErrorIs(t, obs.ReadBarrier(ctxFor(t, 5*time.Second)), journal.ErrRemoved)
	})
}
