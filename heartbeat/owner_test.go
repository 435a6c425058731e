package heartbeat_test

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
)

// propose journals ops through frontend 1 and returns the batch's error.
func (c *cluster) propose(t *testing.T, ops ...catalog.Op) error {
	t.Helper()
	data, err := catalog.Batch{Ops: ops}.Encode()
	require.NoError(t, err)
	_, v, err := fakeJournal{l: c.log, id: 1}.Propose(t.Context(), data)
	require.NoError(t, err)
	return v.(*catalog.Result).Err
}

// ownTasks creates /tasks/gone (deleted when member id's epoch ends) and
// /tasks/kept (orphan-marked then), owned by id's current epoch.
func (c *cluster) ownTasks(t *testing.T, id uint64, epoch heartbeat.Epoch) {
	t.Helper()
	tree := c.frontends[1].tree
	gone, err := heartbeat.OwnerOf(tree, id, epoch, false)
	require.NoError(t, err)
	kept, err := heartbeat.OwnerOf(tree, id, epoch, true)
	require.NoError(t, err)
	require.NoError(t, c.propose(t,
		catalog.Op{Type: catalog.OpCreate, Path: "/tasks", Kind: "dir"},
		catalog.Op{Type: catalog.OpCreate, Path: "/tasks/gone", Kind: "task", Owner: gone},
		catalog.Op{Type: catalog.OpCreate, Path: "/tasks/gone/part", Kind: "part"},
		catalog.Op{Type: catalog.OpCreate, Path: "/tasks/kept", Kind: "task", Owner: kept},
	))
}

// requireEnded checks on every frontend that member id's owned tasks went
// in the apply of its record's last transition, with the given reason.
func (c *cluster) requireEnded(t *testing.T, id uint64, reason string) {
	t.Helper()
	for fid, f := range c.frontends {
		rec, ok := f.tree.Get(heartbeat.MemberPath(id))
		require.True(t, ok)
		_, ok = f.tree.Get("/tasks/gone")
		require.False(t, ok, "frontend %d still holds the owned task", fid)
		kept, ok := f.tree.Get("/tasks/kept")
		require.True(t, ok, "frontend %d lost the orphan-marked task", fid)
		require.Equal(t, catalog.Int(int64(rec.Modified)), kept.Attrs[catalog.OrphanedAttr], "the mark names the transition's index")
		require.Equal(t, catalog.String(reason), kept.Attrs[catalog.OrphanReasonAttr])
		require.Zero(t, f.tree.OwnedCount())
	}
}

// requireOwned checks on every frontend that the owned tasks are there.
func (c *cluster) requireOwned(t *testing.T) {
	t.Helper()
	for fid, f := range c.frontends {
		_, ok := f.tree.Get("/tasks/gone/part")
		require.True(t, ok, "frontend %d lost the owned task", fid)
		require.Equal(t, 2, f.tree.OwnedCount(), "frontend %d", fid)
	}
}

func TestWorkerRestartRemovesItsOwnedNodesAndFencesItsOldEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 1)
		old := c.workers[10].epoch
		c.ownTasks(t, 10, old)
		fence, err := heartbeat.Fence(c.frontends[1].tree, 10, old)
		require.NoError(t, err)
		require.NoError(t, c.propose(t, fence, catalog.Op{Type: catalog.OpCreate, Path: "/tasks/w1", Kind: "write"}), "the fence passes while the epoch is current")

		c.restartWorker(10)
		c.advance(interval) // one round journals the restart
		c.requireEnded(t, 10, catalog.OrphanOwnerChanged)
		err = c.propose(t, fence, catalog.Op{Type: catalog.OpCreate, Path: "/tasks/w2", Kind: "write"})
		require.ErrorIs(t, err, catalog.ErrConflict, "a write fenced on the ended epoch is refused")
		_, err = heartbeat.OwnerOf(c.frontends[2].tree, 10, old, false)
		require.ErrorIs(t, err, heartbeat.ErrEpochEnded)
		// The stale owner, had a client read it before the restart, is
		// refused at apply on every replica.
		err = c.propose(t, catalog.Op{Type: catalog.OpCreate, Path: "/tasks/late", Kind: "task", Owner: catalog.Owner{Path: heartbeat.MemberPath(10), Version: 1}})
		require.ErrorIs(t, err, catalog.ErrConflict)
		for _, f := range c.frontends {
			_, ok := f.tree.Get("/tasks/late")
			require.False(t, ok)
		}
	})
}

func TestWorkerDeathRemovesItsOwnedNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 1)
		c.ownTasks(t, 10, c.workers[10].epoch)
		c.net.set(addrOf(10), nil) // the worker's process is gone
		c.advance((deadAfter + 1) * interval)
		m, _ := c.frontends[2].ms.Member(10)
		require.Equal(t, heartbeat.StatusDead, m.Status)
		c.requireEnded(t, 10, catalog.OrphanOwnerChanged)
	})
}

func TestMemberRemovalRemovesItsOwnedNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 1)
		c.ownTasks(t, 10, c.workers[10].epoch)
		require.NoError(t, c.frontends[1].ms.Remove(t.Context(), 10))
		for _, f := range c.frontends {
			_, ok := f.tree.Get("/tasks/gone")
			require.False(t, ok)
			kept, _ := f.tree.Get("/tasks/kept")
			require.Equal(t, catalog.String(catalog.OrphanOwnerDeleted), kept.Attrs[catalog.OrphanReasonAttr])
		}
	})
}

func TestLeaderChangeAndUnrecordedSuspicionRemoveNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 1)
		c.ownTasks(t, 10, c.workers[10].epoch)
		before, _ := c.frontends[1].tree.Get(heartbeat.MemberPath(10))

		// A new leader claims the monitor and heartbeats on: it writes its
		// claim, not the records.
		c.setLeader(2, 2)
		c.advance(3 * interval)
		c.requireOwned(t)

		// Missed heartbeats short of DeadAfter: suspected, never recorded.
		c.net.cut("*", addrOf(10), true)
		c.advance((deadAfter - 1) * interval)
		c.net.cut("*", addrOf(10), false)
		c.advance(2 * interval)
		c.requireOwned(t)
		after, _ := c.frontends[1].tree.Get(heartbeat.MemberPath(10))
		require.Equal(t, before.Modified, after.Modified, "the worker's record did not change")
	})
}

func TestOwnerOfRefusesBadArguments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1, 1)
		tree := c.frontends[1].tree
		_, err := heartbeat.OwnerOf(tree, 99, heartbeat.NewEpoch(), false)
		require.ErrorIs(t, err, heartbeat.ErrNotFound)
		_, err = heartbeat.OwnerOf(tree, 10, heartbeat.Epoch{}, false)
		require.ErrorIs(t, err, heartbeat.ErrInvalid)
		_, err = heartbeat.Fence(tree, 10, heartbeat.NewEpoch())
		require.ErrorIs(t, err, heartbeat.ErrEpochEnded)
	})
}

// applyEverywhere journals ops as one entry applied on every frontend's
// tree and returns each replica's error, by frontend id.
func (c *cluster) applyEverywhere(t *testing.T, ops ...catalog.Op) map[uint64]error {
	t.Helper()
	data, err := catalog.Batch{Ops: ops}.Encode()
	require.NoError(t, err)
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	c.log.index++
	errs := map[uint64]error{}
	for id, tree := range c.log.trees {
		errs[id] = tree.Apply(c.log.index, data).(*catalog.Result).Err
	}
	return errs
}

func TestWriteFencedOnAnEndedEpochFailsAlikeOnEveryReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 1)
		fence, err := heartbeat.Fence(c.frontends[1].tree, 10, c.workers[10].epoch)
		require.NoError(t, err)
		write := catalog.Op{Type: catalog.OpCreate, Path: "/fenced", Kind: "write"}
		c.restartWorker(10)
		c.advance(interval) // one round journals the restart

		errs := c.applyEverywhere(t, fence, write)
		require.Len(t, errs, 3)
		for id, err := range errs {
			require.ErrorIs(t, err, catalog.ErrConflict, "frontend %d", id)
			require.Equal(t, errs[1].Error(), err.Error(), "frontend %d fails the batch as frontend 1 does", id)
			_, ok := c.frontends[id].tree.Get("/fenced")
			require.False(t, ok, "frontend %d applied the fenced write", id)
		}
	})
}
