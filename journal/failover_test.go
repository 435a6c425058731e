package journal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// Closing the leader elects another voter (never the observer); writes go
// on through every remaining node; the old leader restarts from its data
// dir in the same cluster and role, replays the whole log, and every node
// applied the same sequence.
func TestFailoverAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Observers: 1})
		ctx := ctxFor(t, time.Minute)
		old, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		for id := uint64(1); id <= 4; id++ {
			proposeVia(ctx, t, c.Node(id), fmt.Sprintf("before-%d", id))
		}
		require.NoError(t, c.Stop(old))
		var rest []uint64
		for id := uint64(1); id <= 3; id++ {
			if id != old {
				rest = append(rest, id)
			}
		}
		leader, err := c.WaitNewLeader(ctx, old)
		require.NoError(t, err)
		require.Contains(t, rest, leader)
		for _, id := range append(rest, 4) {
			proposeVia(ctx, t, c.Node(id), fmt.Sprintf("after-%d", id))
		}
		require.Zero(t, c.Node(4).Journal().CampaignsForTest(), "the observer never campaigns")

		// Restart the old leader from its data dir: same cluster, same
		// role, and the whole log replays into a fresh state machine.
		require.NoError(t, c.Restart(ctx, old))
		n := c.Node(old)
		st := n.Journal().Status()
		require.Equal(t, journal.Follower, st.Role)
		require.Equal(t, c.Node(leader).Journal().Status().ClusterID, st.ClusterID)
		require.NoError(t, n.Journal().ReadBarrier(ctx))
		for id := uint64(1); id <= 4; id++ {
			require.True(t, applied(n, fmt.Sprintf("before-%d", id)))
		}
		for _, id := range append(rest, 4) {
			require.True(t, applied(n, fmt.Sprintf("after-%d", id)), "restarted node replayed after-%d", id)
		}
		proposeVia(ctx, t, n, "from-restarted")
		require.NoError(t, c.Node(leader).Journal().ReadBarrier(ctx))
		want := appliedData(c.Node(leader))
		for id := uint64(1); id <= 4; id++ {
			require.NoError(t, c.Node(id).Journal().ReadBarrier(ctx))
			require.Equal(t, want, appliedData(c.Node(id)), "node %d", id)
		}
	})
}

// A leader cut off from the others steps down and cannot write while the
// others elect a leader and write on; healed, it catches up and writes.
func TestPartitionAndHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Observers: 1})
		ctx := ctxFor(t, time.Minute)
		old, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		proposeVia(ctx, t, c.Node(old), "a")
		c.Net.Isolate(old)
		var rest []uint64
		for id := uint64(1); id <= 3; id++ {
			if id != old {
				rest = append(rest, id)
			}
		}
		_, err = c.WaitNewLeader(ctx, old)
		require.NoError(t, err)
		// The isolated old leader steps down (check quorum) and cannot
		// write.
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, _, err = c.Node(old).Journal().Propose(pctx, []byte("lost"))
		cancel()
		require.Error(t, err)
		require.True(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, journal.ErrNoLeader), "got %v", err)
		for _, id := range append(rest, 4) {
			proposeVia(ctx, t, c.Node(id), fmt.Sprintf("during-%d", id))
		}
		c.Net.Heal()
		require.NoError(t, c.Node(old).Journal().ReadBarrier(ctx))
		for _, id := range append(rest, 4) {
			require.True(t, applied(c.Node(old), fmt.Sprintf("during-%d", id)), "healed node caught up")
		}
		proposeVia(ctx, t, c.Node(old), "after-heal")
		require.Zero(t, c.Node(4).Journal().CampaignsForTest(), "the observer never campaigns")
	})
}

// With the leader's messages to one follower lost, one way, the leader
// keeps its lead and its term: the follower's election timer runs out and
// it asks for pre-votes, which reach the others, but the other follower
// hears the leader (its lease holds) and the leader leads (raft's
// pre-vote and check-quorum). Writes go on through the other nodes; healed,
// the follower catches up under the same leader, still in that term.
func TestOneWayDropToAFollowerKeepsTheLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Observers: 1})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		proposeVia(ctx, t, c.Node(leader), "before")
		var follower, other uint64
		for id := uint64(1); id <= 3; id++ {
			switch {
			case id == leader:
			case follower == 0:
				follower = id
			default:
				other = id
			}
		}
		term := c.Node(leader).Journal().Status().Term
		campaigns := c.Node(follower).Journal().CampaignsForTest()
		c.Net.Drop(leader, follower, 1)
		// Ten election timeouts: the follower campaigns several times.
		for k := range 10 {
			proposeVia(ctx, t, c.Node(leader), fmt.Sprintf("leader-%d", k))
			proposeVia(ctx, t, c.Node(other), fmt.Sprintf("other-%d", k))
			proposeVia(ctx, t, c.Node(4), fmt.Sprintf("observer-%d", k))
			afterTicks(bubbleElectionTicks)
			for id := uint64(1); id <= 3; id++ {
				st := c.Node(id).Journal().Status()
				require.Equal(t, term, st.Term, "node %d's term under the drop (round %d)", id, k)
				if id != follower {
					require.Equal(t, leader, st.Leader, "node %d's leader under the drop (round %d)", id, k)
				}
			}
		}
		require.Greater(t, c.Node(follower).Journal().CampaignsForTest(), campaigns, "the follower's election timer ran out under the drop")
		c.Net.Heal()
		f := c.Node(follower)
		awaitTicks(t, 10*bubbleElectionTicks, "the follower caught up", func() bool { return applied(f, "observer-9") })
		for id := uint64(1); id <= 3; id++ {
			st := c.Node(id).Journal().Status()
			require.Equal(t, term, st.Term, "node %d's term after healing", id)
			require.Equal(t, leader, st.Leader, "node %d's leader after healing", id)
		}
		proposeVia(ctx, t, f, "after-heal")
	})
}

// With every link cut no node writes; reads go on locally until the
// staleness tolerance passes, then fail; healed, every node is fresh again
// and the cluster writes.
func TestQuorumLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const staleAfter = 300 * time.Millisecond
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Observers: 1, Configure: func(cfg *journal.Config) {
			cfg.StaleAfter = staleAfter
		}})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		proposeVia(ctx, t, c.Node(4), "x")
		require.NoError(t, c.Node(4).Journal().CheckFresh())
		for id := uint64(1); id <= 3; id++ {
			require.NoError(t, c.Node(id).Journal().ReadBarrier(ctx))
			require.True(t, applied(c.Node(id), "x"), "node %d applied x before the cut", id)
		}
		// Cut every link: no quorum anywhere.
		c.Net.Partition([]uint64{1}, []uint64{2}, []uint64{3}, []uint64{4})
		for id := uint64(1); id <= 4; id++ {
			pctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
			_, _, err := c.Node(id).Journal().Propose(pctx, []byte("nope"))
			cancel()
			require.Error(t, err, "node %d", id)
			require.True(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, journal.ErrNoLeader), "node %d: %v", id, err)
		}
		// The proposals above waited up to 4 × 400 ms with no quorum;
		// past the tolerance since the last timestamp any node applied,
		// every node is stale.
		time.Sleep(staleAfter)
		synctest.Wait()
		for id := uint64(1); id <= 4; id++ {
			n := c.Node(id)
			require.True(t, applied(n, "x"))
			require.ErrorIs(t, n.Journal().CheckFresh(), journal.ErrStale, "node %d", id)
			require.True(t, n.Journal().Status().Stale)
			require.NotEqual(t, journal.StateLeader, n.Journal().Status().State, "node %d stepped down", id)
		}
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err = c.Node(2).Journal().ReadBarrier(rctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		c.Net.Heal()
		_, err = c.WaitLeader(ctx)
		require.NoError(t, err)
		for id := uint64(1); id <= 4; id++ {
			j := c.Node(id).Journal()
			awaitTicks(t, 5*bubbleElectionTicks, fmt.Sprintf("node %d fresh", id), func() bool { return j.CheckFresh() == nil })
		}
		proposeVia(ctx, t, c.Node(leader), "back")
	})
}
