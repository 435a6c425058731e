package frontendtest

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
)

func memberIDs(f interface{ Status() journal.Status }) []uint64 {
	var ids []uint64
	for _, m := range f.Status().Members {
		ids = append(ids, m.ID)
	}
	return ids
}

func TestForceNewClusterAfterAQuorumLossKeepsTheSurvivorsCatalogAndTakesNewMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := threeWithLeaderIn(t, Options{Frontends: 3, InMemory: true})
		res, err := c.Frontend(leader).Write(ctx, catalog.Batch{Ops: []catalog.Op{
			{Type: catalog.OpCreate, Path: "/before", Kind: "table", Cond: catalog.Cond{Absent: true}},
		}})
		require.NoError(t, err)
		survivor := followers[0]
		require.NoError(t, c.Frontend(survivor).Journal().WaitApplied(ctx, res.Index))
		// The majority is lost for good: its power cut, never restarted.
		require.NoError(t, c.Crash(leader))
		require.NoError(t, c.Crash(followers[1]))

		f, err := c.ForceNewCluster(ctx, survivor)
		require.NoError(t, err)
		l, err := c.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, survivor, l, "the forced survivor elects itself")
		require.Equal(t, []uint64{uint64(survivor)}, memberIDs(f.Journal()), "the lost members are removed")
		_, ok := f.Tree().Get("/before")
		require.True(t, ok, "the survivor keeps what it applied")

		_, err = c.JoinFrontend(ctx, 9, journal.Follower, survivor)
		require.NoError(t, err)
		_, err = f.Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/after", Kind: "table"}}})
		require.NoError(t, err, "the new cluster of two voters accepts writes")
		g := c.Frontend(9)
		require.NoError(t, g.Journal().ReadBarrier(ctx))
		_, ok = g.Tree().Get("/before")
		require.True(t, ok, "a new member receives the survivor's catalog")

		// A lost member restarted from its data dir is not let back in.
		old, err := c.RestartFrontend(ctx, leader)
		require.NoError(t, err)
		_, err = old.Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/lost", Kind: "table"}}})
		require.Error(t, err, "a member the force removed cannot commit a write")
		c.StopFrontend(leader)
		require.NoError(t, f.Journal().ReadBarrier(ctx))
		_, ok = f.Tree().Get("/lost")
		require.False(t, ok)
		require.ElementsMatch(t, []uint64{uint64(survivor), 9}, memberIDs(f.Journal()))
	})
}

func TestForceNewClusterRefusesAnInvalidID(t *testing.T) {
	c := &Cluster{net: NewNetwork()}
	_, err := c.ForceNewCluster(t.Context(), 0)
	require.ErrorIs(t, err, ErrInvalidFrontend)
}

func TestBackupAndRestoreStartANewClusterWithTheBackupsCatalog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := threeWithLeaderIn(t, Options{Frontends: 3, InMemory: true})
		res, err := c.Frontend(leader).Write(ctx, catalog.Batch{Ops: []catalog.Op{
			{Type: catalog.OpCreate, Path: "/before", Kind: "table", Cond: catalog.Cond{Absent: true}},
		}})
		require.NoError(t, err)
		from := c.Frontend(followers[0])
		require.NoError(t, from.Journal().WaitApplied(ctx, res.Index))
		_, err = from.Checkpointer().Checkpoint(ctx)
		require.NoError(t, err)
		oldCluster := from.Journal().Status().ClusterID

		ops := vfs.NewMem()
		info, err := c.Backup(ctx, followers[0], ops, "/backup.image")
		require.NoError(t, err)
		require.GreaterOrEqual(t, info.Index, res.Index, "the backup holds the checkpointed write")
		_, err = c.Frontend(leader).Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/later", Kind: "table"}}})
		require.NoError(t, err)
		for i := 1; i <= 3; i++ {
			c.StopFrontend(i)
		}

		f, err := c.Restore(ctx, 7, ops, "/backup.image")
		require.NoError(t, err)
		l, err := c.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, 7, l)
		st := f.Journal().Status()
		require.NotEqual(t, oldCluster, st.ClusterID, "a restore starts a new cluster")
		require.Equal(t, []uint64{7}, memberIDs(f.Journal()))
		require.NoError(t, f.Journal().ReadBarrier(ctx))
		_, ok := f.Tree().Get("/before")
		require.True(t, ok, "the restored cluster holds the backup's catalog")
		_, ok = f.Tree().Get("/later")
		require.False(t, ok, "what came after the backup is not in it")

		_, err = c.JoinFrontend(ctx, 8, journal.Follower, 7)
		require.NoError(t, err)
		_, err = f.Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/after", Kind: "table"}}})
		require.NoError(t, err)
	})
}

func TestBackupAndRestoreRefuseInvalidFrontends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, _ := threeWithLeaderIn(t, Options{Frontends: 3, InMemory: true})
		c.StopFrontend(leader)
		_, err := c.Backup(ctx, leader, vfs.NewMem(), "/b")
		require.ErrorIs(t, err, ErrInvalidFrontend, "a stopped frontend serves no backup")
		running := leader%3 + 1
		_, err = c.Restore(ctx, running, vfs.NewMem(), "/b")
		require.ErrorIs(t, err, ErrInvalidFrontend, "a running frontend's dir is not restored over")
	})
}

// A restore's cluster starts at the backup's term, below the one the old
// cluster reached. The workers move to it at its first heartbeat (which
// names the old cluster replaced) and cancel the old coordinators'
// fragments; an old member started again on its disk, the old cluster's
// leader at a higher term, cannot take them back: the restored cluster's
// queries run on.
func TestWorkersFollowTheRestoredClusterAndRefuseTheOldOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCluster(t, Options{Frontends: 1, Workers: 1, InMemory: true})
		ctx, stop := context.WithTimeout(t.Context(), 5*time.Minute)
		defer stop()
		_, err := c.Leader(ctx)
		require.NoError(t, err)
		const worker = 2
		old, err := c.StartQuery(ctx, 1, worker)
		require.NoError(t, err)
		_, err = c.Frontend(1).Checkpointer().Checkpoint(ctx)
		require.NoError(t, err)
		ops := vfs.NewMem()
		info, err := c.Backup(ctx, 1, ops, "/backup.image")
		require.NoError(t, err)
		// The old cluster goes on after the backup: elections raise its
		// term past the one the restored cluster elects its leader in, and
		// the worker hears it.
		for c.Frontend(1).Journal().Status().Term <= info.Term+1 {
			c.StopFrontend(1)
			_, err = c.RestartFrontend(ctx, 1)
			require.NoError(t, err)
			_, err = c.Leader(ctx)
			require.NoError(t, err)
		}
		require.NoError(t, c.await(ctx, "the worker hears the old cluster's term", func() bool {
			st := c.Frontend(1).Journal().Status()
			return st.IsLeader() && c.Worker(worker).Responder().Term() == st.Term
		}))
		oldTerm := c.Frontend(1).Journal().Status().Term
		c.StopFrontend(1)

		f, err := c.Restore(ctx, 7, ops, "/backup.image")
		require.NoError(t, err)
		require.Less(t, f.Journal().Status().Term, oldTerm, "the restored cluster's term is the lower")
		zombie, err := c.RestartFrontend(ctx, 1)
		require.NoError(t, err)
		defer c.StopFrontend(1)

		<-old.Fragment(worker).Done()
		require.ErrorIs(t, context.Cause(old.Fragment(worker)), cancel.ErrNodeRemoved, "the old coordinator's fragment")
		require.NoError(t, c.await(ctx, "the old cluster's leader beats again", func() bool {
			return zombie.Journal().Status().IsLeader()
		}))
		q, err := c.StartQuery(ctx, 7, worker)
		require.NoError(t, err, "the worker knows the restored cluster's frontend")
		defer q.Finish()
		select {
		case <-q.Fragment(worker).Done():
			t.Fatalf("the restored cluster's query was cancelled on the worker: %v", context.Cause(q.Fragment(worker)))
		case <-time.After(30 * time.Second): // 30 heartbeat rounds of both clusters
		}
		require.Less(t, c.Worker(worker).Responder().Term(), oldTerm, "the worker follows the restored cluster")
	})
}
