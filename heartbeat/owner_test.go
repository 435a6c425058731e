package heartbeat_test

import (
	"fmt"
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
	check, gone := heartbeat.OwnerOf(id, epoch, false)
	_, kept := heartbeat.OwnerOf(id, epoch, true)
	require.NoError(t, c.propose(t, check,
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
		index, why, err := catalog.ParseOrphanMark(kept.Attrs[catalog.OrphanedAttr].Str())
		require.NoError(t, err)
		require.Equal(t, rec.Modified, index, "the mark names the transition's index")
		require.Equal(t, reason, why)
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
		fence := heartbeat.Fence(10, old)
		require.NoError(t, c.propose(t, fence, catalog.Op{Type: catalog.OpCreate, Path: "/tasks/w1", Kind: "write"}), "the fence passes while the epoch is current")

		c.restartWorker(10)
		c.advance(interval) // one round journals the restart
		c.requireEnded(t, 10, catalog.OrphanOwnerChanged)
		err := c.propose(t, fence, catalog.Op{Type: catalog.OpCreate, Path: "/tasks/w2", Kind: "write"})
		require.ErrorIs(t, err, catalog.ErrConflict, "a write fenced on the ended epoch is refused")
		check, owner := heartbeat.OwnerOf(10, old, false)
		err = c.propose(t, check, catalog.Op{Type: catalog.OpCreate, Path: "/tasks/late", Kind: "task", Owner: owner})
		require.ErrorIs(t, err, catalog.ErrConflict, "a create owned by the ended epoch is refused")
		// A version read before the restart is refused at apply on every
		// replica.
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
			_, reason, err := catalog.ParseOrphanMark(kept.Attrs[catalog.OrphanedAttr].Str())
			require.NoError(t, err)
			require.Equal(t, catalog.OrphanOwnerDeleted, reason)
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

// OwnerOf's check and Fence hold only while the member exists and is
// alive with the epoch given (the zero epoch: any); a create whose check
// holds is owned by the record's version at apply.
func TestOwnerOfAndFenceHoldOnlyWhileTheMemberIsAliveWithTheEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1, 1)
		current := c.workers[10].epoch
		for i, tc := range []struct {
			name  string
			id    uint64
			epoch heartbeat.Epoch
			ok    bool
		}{
			{"an unknown member", 99, current, false},
			{"another epoch", 10, heartbeat.NewEpoch(), false},
			{"the current epoch", 10, current, true},
			{"any epoch", 10, heartbeat.Epoch{}, true},
		} {
			check, owner := heartbeat.OwnerOf(tc.id, tc.epoch, false)
			require.Equal(t, heartbeat.Fence(tc.id, tc.epoch), check, tc.name)
			path := fmt.Sprintf("/task-%d", i)
			err := c.propose(t, check, catalog.Op{Type: catalog.OpCreate, Path: path, Kind: "task", Owner: owner})
			if !tc.ok {
				require.ErrorIs(t, err, catalog.ErrConflict, tc.name)
				continue
			}
			require.NoError(t, err, tc.name)
			rec, _ := c.frontends[1].tree.Get(heartbeat.MemberPath(10))
			o, ok := c.frontends[1].tree.Owned(path)
			require.True(t, ok, tc.name)
			require.Equal(t, catalog.Owner{Path: heartbeat.MemberPath(10), Version: rec.Modified}, o, tc.name)
		}

		c.net.set(addrOf(10), nil) // the worker's process is gone
		c.advance((deadAfter + 1) * interval)
		check, owner := heartbeat.OwnerOf(10, heartbeat.Epoch{}, false)
		err := c.propose(t, check, catalog.Op{Type: catalog.OpCreate, Path: "/late", Kind: "task", Owner: owner})
		require.ErrorIs(t, err, catalog.ErrConflict, "a dead member owns nothing new, whatever the epoch")
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
		fence := heartbeat.Fence(10, c.workers[10].epoch)
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
