package frontendtest

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/journal"
)

// requireSameCatalog waits until frontend i has applied what the leader
// has, and requires the same catalog digest.
func requireSameCatalog(t *testing.T, ctx context.Context, c *Cluster, leader, i int) {
	t.Helper()
	want := c.Frontend(leader).Journal().Status().Applied
	require.NoError(t, c.Frontend(i).Journal().WaitApplied(ctx, want))
	require.NoError(t, c.Frontend(leader).Journal().ReadBarrier(ctx))
	li, ld := c.Frontend(leader).Tree().Digest()
	fi, fd := c.Frontend(i).Tree().Digest()
	require.Equal(t, li, fi, "frontend %d at the leader's index", i)
	require.Equal(t, ld, fd, "frontend %d's catalog is the leader's", i)
}

// raftRole returns member id's role in f's raft membership.
func raftRole(f *frontend.Frontend, id uint64) (journal.Role, bool) {
	for _, m := range f.Journal().Status().Members {
		if m.ID == id {
			return m.Role, true
		}
	}
	return journal.RoleUnset, false
}

func TestJoinFrontendAsAnObserverConvergesAndIsPromoted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := threeWithLeader(t)
		_, err := c.Frontend(leader).Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/before", Kind: "dir"}}})
		require.NoError(t, err)
		f, err := c.JoinFrontend(ctx, 7, journal.Observer, followers[0])
		require.NoError(t, err)
		_, err = c.Frontend(leader).Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/after", Kind: "dir"}}})
		require.NoError(t, err)
		requireSameCatalog(t, ctx, c, leader, 7)
		m, ok := f.Members().Member(7)
		require.True(t, ok, "the joined frontend registered its member record")
		require.Equal(t, epoch.KindFrontend, m.Kind)

		require.NoError(t, c.Frontend(followers[1]).Journal().Promote(ctx, 7))
		f, err = c.RestartFrontend(ctx, 7)
		require.NoError(t, err, "a promoted observer restarts with the role it joined with")
		require.Equal(t, journal.Follower, f.Journal().Status().Role)
		_, err = c.AddWorker(ctx, 7)
		require.ErrorIs(t, err, ErrInvalidWorker, "a joined frontend's id is no worker's")
	})
}

func TestJoinFrontendAsAVoterAndARemovedIDIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := threeWithLeader(t)
		_, err := c.JoinFrontend(ctx, 8, journal.Follower, followers[1])
		require.NoError(t, err)
		requireSameCatalog(t, ctx, c, leader, 8)
		role, ok := raftRole(c.Frontend(leader), 8)
		require.True(t, ok)
		require.Equal(t, journal.Follower, role, "frontend 8 joined as a voter")

		for _, id := range []int{0, leader} {
			_, err := c.JoinFrontend(ctx, id, journal.Follower, leader)
			require.ErrorIs(t, err, ErrInvalidFrontend, "id %d", id)
		}

		gone := followers[0]
		require.NoError(t, c.Frontend(leader).RemoveMember(ctx, uint64(gone), false))
		c.StopFrontend(gone)
		jctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err = c.JoinFrontend(jctx, gone, journal.Follower, leader)
		require.Error(t, err, "a removed id joins again")
		require.Nil(t, c.Frontend(gone))
		_, ok = raftRole(c.Frontend(leader), uint64(gone))
		require.False(t, ok, "the removed id stays out of raft")
	})
}

func TestReaddWorkerServesNewQueriesAfterItsRemovalCancelledTheOld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := withWorkers(t)
		q, err := c.StartQuery(ctx, followers[0], 4, 5)
		require.NoError(t, err)
		defer q.Finish()
		require.NoError(t, c.Frontend(leader).RemoveMember(ctx, 4, false))
		requireCancelled(t, ctx, q.Context(), cancel.ErrNodeRemoved, 4)

		old := c.Worker(4).Epoch()
		w, err := c.ReaddWorker(ctx, 4)
		require.NoError(t, err)
		require.NotEqual(t, old, w.Epoch(), "the re-added worker runs a new process")
		q2, err := c.StartQuery(ctx, followers[1], 4)
		require.NoError(t, err)
		defer q2.Finish()
		require.NoError(t, q2.Context().Err(), "a query on the re-added worker runs")
		_, err = c.RestartWorker(ctx, 4)
		require.NoError(t, err)
		requireCancelled(t, ctx, q2.Context(), cancel.ErrNodeRestarted, 4)

		_, err = c.ReaddWorker(ctx, 9)
		require.ErrorIs(t, err, ErrInvalidWorker, "a worker never added")
	})
}
