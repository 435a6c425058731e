package heartbeat_test

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/catalog/catalogtest"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
)

// propose journals ops through frontend 1 and returns the batch's error.
func (c *cluster) propose(t *testing.T, ops ...catalog.Op) error {
	t.Helper()
	data, err := catalog.Batch{Ops: ops}.Encode()
	require.NoError(t, err)
	_, v, err := c.log.Replica(1).Propose(t.Context(), data)
	require.NoError(t, err)
	return v.(*catalog.Result).Err
}

// ownTasks creates /tasks/gone (deleted when member id's epoch ends) and
// /tasks/kept (orphan-marked then), owned by id's current epoch.
func (c *cluster) ownTasks(t *testing.T, id uint64, epoch epoch.Epoch) {
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
		require.Zero(t, catalogtest.OwnedCount(f.tree))
	}
}

// requireOwned checks on every frontend that the owned tasks are there.
func (c *cluster) requireOwned(t *testing.T) {
	t.Helper()
	for fid, f := range c.frontends {
		_, ok := f.tree.Get("/tasks/gone/part")
		require.True(t, ok, "frontend %d lost the owned task", fid)
		require.Equal(t, 2, catalogtest.OwnedCount(f.tree), "frontend %d", fid)
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
			epoch epoch.Epoch
			ok    bool
		}{
			{"an unknown member", 99, current, false},
			{"another epoch", 10, epoch.New(), false},
			{"the current epoch", 10, current, true},
			{"any epoch", 10, epoch.Epoch{}, true},
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
		check, owner := heartbeat.OwnerOf(10, epoch.Epoch{}, false)
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
	_, results := c.log.Commit(data)
	errs := map[uint64]error{}
	for id, res := range results {
		errs[id] = res.(*catalog.Result).Err
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

// A worker cut off past the death bound and declared dead, whose process
// was never restarted, comes back answering with the epoch it was declared
// dead with. The log recorded that epoch's end: on every replica, a write
// fenced on it and a create owned by it stay refused, and its owned nodes
// stay gone. The leader tells the worker its epoch ended; the worker draws
// a fresh one, which the monitor records as a restart, and works again
// with it.
func TestWorkerDeclaredDeadThatComesBackWithItsEpochIsFencedAndWorksWithANewOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 1)
		w := c.workers[10]
		old := w.resp.Epoch()
		c.ownTasks(t, 10, old)
		fence := heartbeat.Fence(10, old)
		check, owner := heartbeat.OwnerOf(10, old, false)

		c.net.cut("*", addrOf(10), true)
		c.advance((deadAfter + 2) * interval)
		for _, f := range c.frontends {
			m, _ := f.ms.Member(10)
			require.Equal(t, heartbeat.StatusDead, m.Status, "frontend %d", f.id)
		}
		c.requireEnded(t, 10, catalog.OrphanOwnerChanged)
		dead, _ := c.frontends[1].tree.Get(heartbeat.MemberPath(10))

		// The same process answers again.
		c.net.cut("*", addrOf(10), false)
		c.advance(3 * interval)
		for id, err := range c.applyEverywhere(t, fence, catalog.Op{Type: catalog.OpCreate, Path: "/tasks/fenced", Kind: "write"}) {
			require.ErrorIs(t, err, catalog.ErrConflict, "frontend %d: a write fenced on the ended epoch", id)
		}
		for id, err := range c.applyEverywhere(t, check, catalog.Op{Type: catalog.OpCreate, Path: "/tasks/late", Kind: "task", Owner: owner}) {
			require.ErrorIs(t, err, catalog.ErrConflict, "frontend %d: a create owned by the ended epoch", id)
		}
		fresh := w.resp.Epoch()
		require.NotEqual(t, old, fresh, "the worker drew a fresh epoch")
		require.False(t, fresh.Temporary())
		for _, f := range c.frontends {
			for _, p := range []string{"/tasks/gone", "/tasks/fenced", "/tasks/late"} {
				_, ok := f.tree.Get(p)
				require.False(t, ok, "frontend %d holds %s", f.id, p)
			}
			m, _ := f.ms.Member(10)
			require.Equal(t, heartbeat.StatusAlive, m.Status, "frontend %d", f.id)
			require.Equal(t, fresh, m.Epoch, "frontend %d records the fresh epoch", f.id)
			require.Equal(t, dead.Attrs["generation"].Int64()+1, int64(m.Generation), "one transition after the death: the restart")
			evs := f.events()
			require.Equal(t, epoch.Restarted, evs[len(evs)-1].Type, "frontend %d: the return is a restart", f.id)
			require.Zero(t, countType(evs, 10, epoch.Alive)-1, "frontend %d: no Alive but the first answer", f.id)
		}

		// The fresh epoch works: fenced writes and owned creates apply,
		// and go when it ends.
		require.NoError(t, c.propose(t, heartbeat.Fence(10, fresh), catalog.Op{Type: catalog.OpCreate, Path: "/tasks/again", Kind: "write"}))
		check, owner = heartbeat.OwnerOf(10, fresh, false)
		require.NoError(t, c.propose(t, check, catalog.Op{Type: catalog.OpCreate, Path: "/tasks/new", Kind: "task", Owner: owner}))
		for _, f := range c.frontends {
			require.Equal(t, 1, catalogtest.OwnedCount(f.tree), "frontend %d", f.id)
		}
	})
}

// A worker declared dead and back with its epoch under a new leader: the
// leader that journaled the death is gone, and the new one, which never
// heard the worker alive, tells it all the same, from the record.
func TestWorkerBackWithItsEndedEpochAfterALeaderChangeGetsANewOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 1)
		old := c.workers[10].resp.Epoch()
		c.net.cut("*", addrOf(10), true)
		c.advance((deadAfter + 2) * interval)
		m, _ := c.frontends[2].ms.Member(10)
		require.Equal(t, heartbeat.StatusDead, m.Status)

		c.setLeader(2, 2)
		c.net.cut("*", addrOf(10), false)
		c.advance(3 * interval)
		fresh := c.workers[10].resp.Epoch()
		require.NotEqual(t, old, fresh)
		for _, f := range c.frontends {
			m, _ := f.ms.Member(10)
			require.Equal(t, heartbeat.StatusAlive, m.Status, "frontend %d", f.id)
			require.Equal(t, fresh, m.Epoch, "frontend %d", f.id)
		}
		for id, err := range c.applyEverywhere(t, heartbeat.Fence(10, old)) {
			require.ErrorIs(t, err, catalog.ErrConflict, "frontend %d", id)
		}
	})
}

// A frontend declared dead that is elected leader while its record says
// so answers its own heartbeat: its epoch ended in the log, so it draws a
// fresh one and journals its return as a restart, never the ended epoch
// alive again.
func TestLeaderDeclaredDeadByAnEarlierLeaderRecordsItsReturnWithANewEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 1)
		old := c.frontends[2].ms.Epoch()
		c.net.cut("*", addrOf(2), true)
		c.advance((deadAfter + 2) * interval)
		m, _ := c.frontends[1].ms.Member(2)
		require.Equal(t, heartbeat.StatusDead, m.Status)

		c.setLeader(2, 2) // still cut off: no heartbeat reaches it, it answers its own
		c.advance(2 * interval)
		fresh := c.frontends[2].ms.Epoch()
		require.NotEqual(t, old, fresh)
		for _, f := range c.frontends {
			m, _ := f.ms.Member(2)
			require.Equal(t, heartbeat.StatusAlive, m.Status, "frontend %d", f.id)
			require.Equal(t, fresh, m.Epoch, "frontend %d", f.id)
		}
		for id, err := range c.applyEverywhere(t, heartbeat.Fence(2, old)) {
			require.ErrorIs(t, err, catalog.ErrConflict, "frontend %d", id)
		}
		claim, _ := c.frontends[1].tree.Get(heartbeat.MonitorPath)
		require.Equal(t, fresh.String(), claim.Attrs["epoch"].Str(), "the claim names the leader's current epoch")
	})
}
