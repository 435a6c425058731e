package journal_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// versionInFlight starts node 1 (reading format version 1 only) and nodes
// 2 and 3 (reading up to 2), so that the cluster stays at version 1; node 2
// takes the lead and node 3 is cut off. Removing node 1 (forced: node 3 is
// unreachable) makes node 2 propose raising the cluster to version 2,
// which cannot commit while node 3 is cut off. Node 2's election timeout
// is long, so that it keeps leading, alone, for the rest of the test.
func versionInFlight(t *testing.T) (c *journaltest.Cluster, leader, follower *journaltest.Node) {
	t.Helper()
	c = journaltest.NewCluster(t, journaltest.Options{Voters: 3, Configure: func(cfg *journal.Config) {
		cfg.MaxVersion = 2
		switch cfg.ID {
		case 1:
			cfg.MaxVersion = 1
		case 2:
			cfg.ElectionTicks = 100_000
		}
	}})
	ctx := ctxFor(t, 30*time.Second)
	n2, n3 := c.Node(2), c.Node(3)
	require.NoError(t, c.Node(1).Journal().TransferLeadership(ctx, 2))
	now, err := c.WaitNewLeader(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(2), now)
	require.Equal(t, uint32(1), n2.Journal().ClusterVersion())

	c.Net.Isolate(3)
	require.NoError(t, n2.Journal().RemoveMember(ctx, 1, true))
	// The removal applied on node 2; its loop proposed the raise in the
	// same step.
	require.Equal(t, uint32(1), n2.Journal().ClusterVersion(), "the raise commits only with node 3")
	return c, n2, n3
}

// A node that reads only version 1, joining while the leader's raise to
// version 2 is in flight (proposed, not yet applied anywhere), is refused
// by the leader with ErrVersion, although every member's applied cluster
// version is still 1: it would become a member that cannot read the
// raise.
func TestJoinRefusedBelowAnInFlightClusterVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, n2, _ := versionInFlight(t)
		_, err := n2.Journal().HandleJoinForTest(ctxFor(t, 5*time.Second), &journal.JoinRequest{ID: 4, Addr: "node4", Role: journal.Follower, MaxVersion: 1})
		require.ErrorIs(t, err, journal.ErrVersion)
		require.Contains(t, err.Error(), "version 2")
		for _, m := range n2.Journal().Status().Members {
			require.NotEqual(t, uint64(4), m.ID, "node 4 is listed as a member")
		}
	})
}

// A membership change that adds a member reading only version 1, in the
// log after the entry raising the cluster to version 2, is refused when it
// applies, alike on every replica: no replica adds the member, the
// cluster is at version 2 everywhere.
func TestAddingAMemberBelowTheClusterVersionIsRefusedOnEveryReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, n2, n3 := versionInFlight(t)
		ctx := ctxFor(t, time.Minute)
		// A change another leader admitted before the raise was in its log.
		require.NoError(t, n2.Journal().ProposeConfChangeRawForTest(ctx, raftpb.ConfChangeAddNode, 4,
			journal.ConfContextForTest{Addr: "node4", Role: journal.Follower, MaxVersion: 1, Key: [16]byte{4}}))
		c.Net.Heal()
		last := proposeVia(ctx, t, n2, "after")
		require.NoError(t, n3.Journal().WaitApplied(ctx, last))

		// The log holds the raise, then the change adding node 4.
		ents, err := n3.Journal().LogEntriesForTest(1, last+1)
		require.NoError(t, err)
		raise := slices.IndexFunc(ents, journal.IsVersionEntryForTest)
		add := slices.IndexFunc(ents, func(e *raftpb.Entry) bool {
			cc, err := journal.DecodeConfChangeForTest(e)
			return err == nil && cc.GetNodeId() == 4
		})
		require.NotEqual(t, -1, raise, "the raise is in the log")
		require.Greater(t, add, raise, "the change adding node 4 is in the log after the raise")

		for _, n := range []*journaltest.Node{n2, n3} {
			st := n.Journal().Status()
			require.NoError(t, st.Err, "node %d", n.ID)
			require.Equal(t, uint32(2), st.ClusterVersion, "node %d", n.ID)
			for _, m := range st.Members {
				require.NotEqual(t, uint64(4), m.ID, "node %d lists node 4 as a member", n.ID)
			}
			voters, _, err := n.Journal().RaftConfigForTest(ctx)
			require.NoError(t, err)
			require.Equal(t, []uint64{2, 3}, voters, "node %d's raft voters", n.ID)
		}
	})
}

// An entry raising the cluster version above what a member reads (in the
// log before that member's admission, or forged) is refused when it
// applies, alike on every replica: the cluster version stays, and the
// member that reads only the older version does not halt.
func TestRaiseAboveAMemberIsRefusedOnEveryReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 2, Configure: func(cfg *journal.Config) {
			cfg.MaxVersion = uint32(cfg.ID) // node 1 reads version 1, node 2 up to 2
		}})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(1), leader, "the bootstrapping node leads")
		n1, n2 := c.Node(1), c.Node(2)
		require.NoError(t, n1.Journal().ProposeRawForTest(ctx, journal.EncodeVersionForTest(2)))
		last := proposeVia(ctx, t, n1, "after")
		require.NoError(t, n2.Journal().WaitApplied(ctx, last))
		for _, n := range []*journaltest.Node{n1, n2} {
			st := n.Journal().Status()
			require.NoError(t, st.Err, "node %d", n.ID)
			require.Equal(t, uint32(1), st.ClusterVersion, "node %d", n.ID)
		}
	})
}
