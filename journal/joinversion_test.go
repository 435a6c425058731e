package journal

import (
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// versionInFlight starts node 1 (reading format version 1 only) and nodes
// 2 and 3 (reading up to 2), so that the cluster stays at version 1; node 2
// takes the lead and node 3 is cut off. Removing node 1 (forced: node 3 is
// unreachable) makes node 2 propose raising the cluster to version 2,
// which cannot commit while node 3 is cut off. Node 2's election timeout
// is long, so that it keeps leading, alone, for the rest of the test.
func versionInFlight(t *testing.T) (c *cluster, leader, follower *node) {
	t.Helper()
	c = newCluster(t)
	n1 := c.listen(1)
	require.NoError(t, c.open(n1, func(cfg *Config) { cfg.Bootstrap = true; cfg.MaxVersion = 1 }))
	c.waitLeader(1)
	n2 := c.listen(2)
	require.NoError(t, c.open(n2, func(cfg *Config) { cfg.Join = n1.addr; cfg.MaxVersion = 2; cfg.ElectionTicks = 100_000 }))
	n3 := c.listen(3)
	require.NoError(t, c.open(n3, func(cfg *Config) { cfg.Join = n1.addr; cfg.MaxVersion = 2 }))
	ctx := ctxT(t, 30*time.Second)
	require.NoError(t, n1.j.TransferLeadership(ctx, 2))
	c.waitLeader(2)
	require.Equal(t, uint32(1), n2.j.ClusterVersion())

	c.partition(3)
	require.NoError(t, n2.j.RemoveMember(ctx, 1, true))
	// The removal applied on node 2; its loop proposed the raise in the
	// same step.
	require.Equal(t, uint32(1), n2.j.ClusterVersion(), "the raise commits only with node 3")
	return c, n2, n3
}

// rawAddVoter proposes, on leader n's loop and past the proposal checks,
// adding node id (reading versions up to maxVersion) as a voter: a change
// another leader admitted before the raise was in its log.
func rawAddVoter(t *testing.T, n *node, id uint64, maxVersion uint32) {
	t.Helper()
	cc := &raftpb.ConfChange{
		Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(id),
		Context: mustJSON(confContext{Addr: "127.0.0.1:1", Role: Follower, MaxVersion: maxVersion, Key: [16]byte{byte(id)}}),
	}
	var err error
	require.NoError(t, n.j.do(ctxT(t, 5*time.Second), func() { err = n.j.rn.ProposeConfChange(cc) }))
	require.NoError(t, err)
}

// voters is raft's set of voters on n.
func voters(t *testing.T, n *node) []uint64 {
	t.Helper()
	var ids []uint64
	require.NoError(t, n.j.do(ctxT(t, 5*time.Second), func() {
		ids = slices.Sorted(maps.Keys(n.j.rn.Status().Config.Voters.IDs()))
	}))
	return ids
}

// A node that reads only version 1, joining while the leader's raise to
// version 2 is in flight (proposed, not yet applied anywhere), is refused
// by the leader with ErrVersion, although every member's applied cluster
// version is still 1: it would become a member that cannot read the
// raise.
func TestJoinRefusedBelowAnInFlightClusterVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, n2, _ := versionInFlight(t)
		_, err := n2.j.handleJoin(ctxT(t, 5*time.Second), &JoinRequest{ID: 4, Addr: "127.0.0.1:1", Role: Follower, MaxVersion: 1, Token: "secret"})
		require.ErrorIs(t, err, ErrVersion)
		require.Contains(t, err.Error(), "version 2")
		for _, m := range n2.j.Status().Members {
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
		rawAddVoter(t, n2, 4, 1)
		c.heal()
		last := propose(t, n2, "after")
		require.NoError(t, n3.j.WaitApplied(ctxT(t, 10*time.Second), last))

		// The log holds the raise, then the change adding node 4.
		ents, err := n3.j.store.Entries(1, last+1, 1<<30)
		require.NoError(t, err)
		raise := slices.IndexFunc(ents, func(e *raftpb.Entry) bool { return isVersionEntry(e) })
		add := slices.IndexFunc(ents, func(e *raftpb.Entry) bool {
			cc, _, err := decodeConfChange(e)
			return err == nil && cc.GetNodeId() == 4
		})
		require.NotEqual(t, -1, raise, "the raise is in the log")
		require.Greater(t, add, raise, "the change adding node 4 is in the log after the raise")

		for _, n := range []*node{n2, n3} {
			st := n.j.Status()
			require.NoError(t, st.Err, "node %d", n.id)
			require.Equal(t, uint32(2), st.ClusterVersion, "node %d", n.id)
			for _, m := range st.Members {
				require.NotEqual(t, uint64(4), m.ID, "node %d lists node 4 as a member", n.id)
			}
			require.Equal(t, []uint64{2, 3}, voters(t, n), "node %d's raft voters", n.id)
		}
	})
}

// An entry raising the cluster version above what a member reads (in the
// log before that member's admission, or forged) is refused when it
// applies, alike on every replica: the cluster version stays, and the
// member that reads only the older version does not halt.
func TestRaiseAboveAMemberIsRefusedOnEveryReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		n1 := c.listen(1)
		require.NoError(t, c.open(n1, func(cfg *Config) { cfg.Bootstrap = true; cfg.MaxVersion = 1 }))
		c.waitLeader(1)
		n2 := c.listen(2)
		require.NoError(t, c.open(n2, func(cfg *Config) { cfg.Join = n1.addr; cfg.MaxVersion = 2 }))
		var err error
		require.NoError(t, n1.j.do(ctxT(t, 5*time.Second), func() { err = n1.j.rn.Propose(encodeVersion(2)) }))
		require.NoError(t, err)
		last := propose(t, n1, "after")
		require.NoError(t, n2.j.WaitApplied(ctxT(t, 10*time.Second), last))
		for _, n := range []*node{n1, n2} {
			st := n.j.Status()
			require.NoError(t, st.Err, "node %d", n.id)
			require.Equal(t, uint32(1), st.ClusterVersion, "node %d", n.id)
		}
	})
}
