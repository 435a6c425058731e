package frontendtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/catalog/catalogtest"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/heartbeattest"
	"github.com/metatree/metatree/journal"
)

// awaitTree waits, through a watch (no polling), until cond holds on t.
func awaitTree(ctx context.Context, t *testing.T, tree *catalog.Tree, cond func() bool) {
	t.Helper()
	w := tree.Watch(catalog.WatchOptions{})
	defer w.Close()
	for !cond() {
		_, err := w.Next(ctx)
		require.NoError(t, err, "the condition never held")
	}
}

func TestAFrontendsOwnedNodeGoesWhenItRestartsWithANewEpoch(t *testing.T) {
	c, ctx, leader, others := threeWithLeader(t)
	lf, owner := c.Frontend(leader), others[0]
	epoch := c.Frontend(owner).Epoch()
	id := c.Frontend(owner).ID()
	require.NoError(t, lf.Journal().WaitClusterVersion(ctx, journal.NewestVersion), "owned nodes need version 4")
	require.NoError(t, c.await(ctx, "the owner's epoch journaled", func() bool {
		m, ok := lf.Members().Member(id)
		return ok && m.Epoch == epoch
	}))
	check, o := heartbeat.OwnerOf(id, epoch, false)
	_, err := lf.Write(ctx, catalog.Batch{Ops: []catalog.Op{
		check,
		{Type: catalog.OpCreate, Path: "/lock", Kind: "lock", Owner: o},
		{Type: catalog.OpCreate, Path: "/other", Kind: "lock"},
	}})
	require.NoError(t, err)
	got, ok := lf.Tree().Owned("/lock")
	require.True(t, ok)
	rec, _ := lf.Tree().Get(heartbeat.MemberPath(id))
	require.Equal(t, catalog.Owner{Path: heartbeat.MemberPath(id), Version: rec.Modified}, got)

	restarted, err := c.RestartFrontend(ctx, owner)
	require.NoError(t, err)
	require.NotEqual(t, epoch, restarted.Epoch())
	for _, i := range []int{leader, others[1]} {
		tree := c.Frontend(i).Tree()
		awaitTree(ctx, t, tree, func() bool { _, ok := tree.Get("/lock"); return !ok })
		_, ok := tree.Get("/other")
		require.True(t, ok, "an unowned node stays")
	}
	_, err = lf.Write(ctx, catalog.Batch{Ops: []catalog.Op{check, {Type: catalog.OpCreate, Path: "/late", Kind: "lock", Owner: o}}})
	require.ErrorIs(t, err, catalog.ErrConflict, "the ended epoch owns nothing new")
}

// The owned tasks of ownTasks.
const (
	goneTask  = "/tasks/gone"      // deleted with its subtree when the epoch ends
	goneKid   = "/tasks/gone/part" // in that subtree
	keptTask  = "/tasks/kept"      // kept, orphan-marked, when the epoch ends
	otherTask = "/tasks/other"     // owned by another worker's epoch: stays
)

// ownTasks writes, through f, the tasks of worker id at its running epoch
// and one of worker other's: goneTask with goneKid, keptTask (marked
// orphaned when the epoch ends) and otherTask. It waits for the cluster
// version that owned nodes need, and then for every running frontend to
// apply the tasks.
func ownTasks(ctx context.Context, t *testing.T, c *Cluster, f *frontend.Frontend, id, other uint64) {
	t.Helper()
	require.NoError(t, f.Journal().WaitClusterVersion(ctx, journal.NewestVersion), "owned nodes need cluster version 4 (batch format 3)")
	owner := func(id uint64, orphan bool) catalog.Owner {
		_, o := heartbeat.OwnerOf(id, c.Worker(id).Epoch(), orphan)
		return o
	}
	res, err := f.Write(ctx, catalog.Batch{Ops: []catalog.Op{
		heartbeat.Fence(id, c.Worker(id).Epoch()),
		heartbeat.Fence(other, c.Worker(other).Epoch()),
		{Type: catalog.OpCreate, Path: "/tasks", Kind: "dir"},
		{Type: catalog.OpCreate, Path: goneTask, Kind: "task", Owner: owner(id, false)},
		{Type: catalog.OpCreate, Path: goneKid, Kind: "part"},
		{Type: catalog.OpCreate, Path: keptTask, Kind: "task", Owner: owner(id, true)},
		{Type: catalog.OpCreate, Path: otherTask, Kind: "task", Owner: owner(other, false)},
	}})
	require.NoError(t, err)
	for _, g := range c.running() {
		require.NoError(t, g.Journal().WaitApplied(ctx, res.Index))
	}
}

// ending is what a watch saw of the end of worker id's owned tasks: the
// index of each change, by what changed.
type ending struct {
	record, gone, kid, kept uint64 // indexes: the member record's transition, the deletions, the orphan mark
	keptMark                uint64 // the index the orphan mark names
}

// awaitEnded reads w until it has seen goneTask deleted and keptTask
// marked, and returns the indexes of those changes and of the last change
// of worker id's member record before them.
func awaitEnded(ctx context.Context, t *testing.T, w *catalog.Watcher, id uint64) ending {
	t.Helper()
	var e ending
	for e.gone == 0 || e.kept == 0 {
		ev, err := w.Next(ctx)
		require.NoError(t, err, "the owned tasks never went")
		switch path := eventPath(ev); {
		case path == heartbeat.MemberPath(id) && ev.Op == catalog.OpUpdate:
			e.record = ev.Index
		case path == goneTask && ev.Op == catalog.OpDelete:
			e.gone = ev.Index
		case path == goneKid && ev.Op == catalog.OpDelete:
			e.kid = ev.Index
		case path == keptTask && ev.Op == catalog.OpUpdate:
			e.kept, e.keptMark = ev.Index, markIndex(t, ev.After)
		case strings.HasPrefix(path, "/tasks/"):
			t.Fatalf("unexpected change of a task: %v %s at %d", ev.Op, path, ev.Index)
		}
	}
	return e
}

// requireOneIndex checks that everything in e happened at one index, the
// member record's transition, and returns it.
func requireOneIndex(t *testing.T, e ending) uint64 {
	t.Helper()
	require.NotZero(t, e.record, "the member record's transition is watched")
	require.Equal(t, ending{record: e.record, gone: e.record, kid: e.record, kept: e.record, keptMark: e.record}, e,
		"the transition, the deletions and the orphan mark carry one index")
	return e.record
}

// markIndex is the index the orphan mark of n names.
func markIndex(t *testing.T, n *catalog.Node) uint64 {
	t.Helper()
	index, _, err := catalog.ParseOrphanMark(n.Attrs[catalog.OrphanedAttr].Str())
	require.NoError(t, err, "%s's orphan mark", n.Path)
	return index
}

// eventPath is the path of the node an event is about.
func eventPath(ev catalog.Event) string {
	if ev.After != nil {
		return ev.After.Path
	}
	if ev.Before != nil {
		return ev.Before.Path
	}
	return ""
}

// watchAll starts a watch of the whole tree on every running frontend, by
// index; the test's end closes them.
func watchAll(t *testing.T, c *Cluster) map[int]*catalog.Watcher {
	t.Helper()
	ws := map[int]*catalog.Watcher{}
	for i := 1; i <= c.opts.Frontends; i++ {
		if f := c.Frontend(i); f != nil {
			w := f.Tree().Watch(catalog.WatchOptions{Buffer: 1 << 14})
			t.Cleanup(w.Close)
			ws[i] = w
		}
	}
	return ws
}

// marker writes a node through f and returns its index: a watch read up to
// it has seen everything applied before.
func marker(ctx context.Context, t *testing.T, f *frontend.Frontend, path string) uint64 {
	t.Helper()
	res, err := f.Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: path, Kind: "marker"}}})
	require.NoError(t, err)
	return res.Index
}

// changesUpTo reads w up to and including the batch at index upTo and
// returns the changes of the tasks and of worker id's member record, as
// "op path@index".
func changesUpTo(ctx context.Context, t *testing.T, w *catalog.Watcher, id, upTo uint64) []string {
	t.Helper()
	var got []string
	for {
		ev, err := w.Next(ctx)
		require.NoError(t, err)
		if ev.Index > upTo {
			t.Fatalf("the watch passed index %d without its batch", upTo)
		}
		path := eventPath(ev)
		if strings.HasPrefix(path, "/tasks/") || path == heartbeat.MemberPath(id) {
			got = append(got, fmt.Sprintf("%v %s@%d", ev.Op, path, ev.Index))
		}
		if ev.Index == upTo {
			return got
		}
	}
}

// kitDefaults are the settings, heartbeat ones included, the kit's frontends run with.
var kitDefaults = frontend.Config{}.WithDefaults()

// A worker's owned nodes go in the apply of the transition that ends its
// epoch, on every frontend, within the bound in which its queries are
// cancelled (README: a restart within 1.5 heartbeat intervals, a death
// within DeadAfter + 1): the member record's change, the deletions, the
// orphan mark and the queries' cancellation all carry the same index.
func TestWorkersOwnedNodesGoWithItsEpochWithinTheCancellationBoundAtOneIndex(t *testing.T) {
	interval := kitDefaults.HeartbeatInterval
	for _, tc := range []struct {
		name  string
		end   func(ctx context.Context, c *Cluster) error
		cause error
		bound time.Duration
	}{
		{"restart", func(ctx context.Context, c *Cluster) error { _, err := c.RestartWorker(ctx, 4); return err },
			cancel.ErrNodeRestarted, interval * 3 / 2},
		{"death", func(_ context.Context, c *Cluster) error { c.StopWorker(4); return nil },
			cancel.ErrNodeDead, time.Duration(kitDefaults.DeadAfter+1) * interval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, ctx, leader, followers := withWorkers(t)
				ownTasks(ctx, t, c, c.Frontend(leader), 4, 5)
				ws := watchAll(t, c)
				q, err := c.StartQuery(ctx, followers[0], 4)
				require.NoError(t, err)
				defer q.Finish()

				start := time.Now()
				require.NoError(t, tc.end(ctx, c))
				var index uint64
				for i, w := range ws {
					at := requireOneIndex(t, awaitEnded(ctx, t, w, 4))
					if index == 0 {
						index = at
					}
					require.Equal(t, index, at, "frontend %d ends the tasks at the same index", i)
				}
				took := time.Since(start)
				require.LessOrEqual(t, took, tc.bound, "the owned nodes went within the bound of query cancellation")
				ce := requireCancelled(t, ctx, q.Context(), tc.cause, 4)
				require.Equal(t, index, ce.Index, "the heartbeat event that cancels the query carries the deletions' index")
				for i := range ws {
					f := c.Frontend(i)
					// The registry hears the event from the member records'
					// replay, which follows the tree's apply.
					require.NoError(t, c.await(ctx, fmt.Sprintf("frontend %d's registry applies the event at the deletions' index", i), func() bool {
						n, ok := f.Registry().Node(4)
						return ok && n.Index >= index
					}))
					n, _ := f.Registry().Node(4)
					require.Equal(t, index, n.Index, "frontend %d's registry applied the event at the deletions' index", i)
					_, ok := f.Tree().Get(otherTask)
					require.True(t, ok, "another worker's owned node stays")
					require.Equal(t, 1, catalogtest.OwnedCount(f.Tree()))
				}
			})
		})
	}
}

// A worker cut off from the leader for fewer heartbeats than DeadAfter is
// suspected (the monitor counts the misses) but never declared dead: no
// transition is journaled, so its owned nodes stay and its queries run
// on.
func TestSuspicionTheMonitorNeverRecordsRemovesNoOwnedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := withWorkers(t)
		ownTasks(ctx, t, c, c.Frontend(leader), 4, 5)
		ws := watchAll(t, c)
		q, err := c.StartQuery(ctx, followers[0], 4)
		require.NoError(t, err)
		defer q.Finish()
		ms := c.Frontend(leader).Members()
		before, _ := ms.Member(4)

		misses := heartbeattest.StatsOf(ms).Misses
		c.Network().Partition(WorkerAddr(4), Addr(leader))
		require.NoError(t, c.await(ctx, "the leader misses DeadAfter-1 heartbeats", func() bool {
			return heartbeattest.StatsOf(ms).Misses >= misses+uint64(kitDefaults.DeadAfter-1)
		}))
		c.Heal()
		// As many rounds again as a conviction takes: a miss counted in the
		// cut would show by then.
		rounds := heartbeattest.StatsOf(ms).Rounds
		require.NoError(t, c.await(ctx, "DeadAfter+1 more heartbeat rounds", func() bool {
			return heartbeattest.StatsOf(ms).Rounds >= rounds+uint64(kitDefaults.DeadAfter+1)
		}))

		at := marker(ctx, t, c.Frontend(leader), "/marker")
		for i, w := range ws {
			require.Empty(t, changesUpTo(ctx, t, w, 4, at), "frontend %d saw the worker's record or tasks change", i)
			f := c.Frontend(i)
			for _, p := range []string{goneKid, keptTask, otherTask} {
				_, ok := f.Tree().Get(p)
				require.True(t, ok, "frontend %d keeps %s", i, p)
			}
			require.Equal(t, 3, catalogtest.OwnedCount(f.Tree()))
		}
		after, _ := ms.Member(4)
		require.Equal(t, before.Modified, after.Modified, "the worker's record did not change")
		require.Equal(t, heartbeat.StatusAlive, after.Status)
		require.NoError(t, q.Context().Err(), "the worker's query runs on")
	})
}

// A leader that crashes while a worker is dead, before or after the death
// is journaled, changes nothing: the worker's owned nodes go once, in the
// apply of the one Dead transition, on every frontend (the crashed one
// too, once back). A new leader writes its monitor claim, not the
// worker's record: nothing renews the dead epoch.
func TestDeadWorkersOwnedNodesGoOnceAcrossALeaderCrash(t *testing.T) {
	for _, tc := range []struct {
		name string
		// crashWhen waits for the moment to crash the leader.
		crashWhen func(ctx context.Context, c *Cluster, leader int, misses uint64) error
	}{
		{"before the death is journaled", func(ctx context.Context, c *Cluster, leader int, misses uint64) error {
			ms := c.Frontend(leader).Members()
			return c.await(ctx, "the leader misses a heartbeat", func() bool { return heartbeattest.StatsOf(ms).Misses > misses })
		}},
		{"after the death is journaled", func(ctx context.Context, c *Cluster, leader int, _ uint64) error {
			tree := c.Frontend(leader).Tree()
			return c.await(ctx, "the leader applies the death", func() bool { _, ok := tree.Get(goneTask); return !ok })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, ctx, leader, followers := threeWithLeaderIn(t, Options{Frontends: 3, Workers: 2, InMemory: true})
				ownTasks(ctx, t, c, c.Frontend(leader), 4, 5)
				ws := watchAll(t, c)
				delete(ws, leader) // the crash takes its watch with it
				q, err := c.StartQuery(ctx, followers[0], 4)
				require.NoError(t, err)
				defer q.Finish()

				misses := heartbeattest.StatsOf(c.Frontend(leader).Members()).Misses
				c.StopWorker(4)
				require.NoError(t, tc.crashWhen(ctx, c, leader, misses))
				m, _ := c.Frontend(leader).Members().Member(4)
				require.NoError(t, c.Crash(leader))
				newLeader, err := c.Leader(ctx)
				require.NoError(t, err)
				require.NotEqual(t, leader, newLeader)
				ce := requireCancelled(t, ctx, q.Context(), cancel.ErrNodeDead, 4)
				if tc.name == "before the death is journaled" {
					require.Equal(t, heartbeat.StatusAlive, m.Status, "the old leader had not declared the worker dead")
				}

				// The old leader comes back; the new one heartbeats on for as
				// many rounds again as a conviction takes.
				back, err := c.RestartFrontend(ctx, leader)
				require.NoError(t, err)
				ms := c.Frontend(newLeader).Members()
				rounds := heartbeattest.StatsOf(ms).Rounds
				require.NoError(t, c.await(ctx, "2×DeadAfter+1 more heartbeat rounds", func() bool {
					return heartbeattest.StatsOf(ms).Rounds >= rounds+uint64(2*kitDefaults.DeadAfter+1)
				}))
				at := marker(ctx, t, c.Frontend(newLeader), "/marker")
				d := ce.Index
				want := []string{
					fmt.Sprintf("update %s@%d", heartbeat.MemberPath(4), d),
					fmt.Sprintf("update %s@%d", keptTask, d),
					fmt.Sprintf("delete %s@%d", goneKid, d),
					fmt.Sprintf("delete %s@%d", goneTask, d),
				}
				slices.Sort(want)
				for i, w := range ws {
					got := changesUpTo(ctx, t, w, 4, at)
					slices.Sort(got)
					require.Equal(t, want, got,
						"frontend %d: one transition of the worker, its owned nodes gone once, in its apply", i)
				}
				require.NoError(t, back.Journal().WaitApplied(ctx, at))
				for _, f := range c.running() {
					_, ok := f.Tree().Get(goneTask)
					require.False(t, ok, "frontend %d", f.ID())
					kept, ok := f.Tree().Get(keptTask)
					require.True(t, ok, "frontend %d", f.ID())
					require.Equal(t, d, markIndex(t, &kept), "frontend %d", f.ID())
					m, _ := f.Members().Member(4)
					require.Equal(t, heartbeat.StatusDead, m.Status)
					require.Equal(t, d, m.Modified, "frontend %d: the record's last change is the death", f.ID())
				}
			})
		})
	}
}

// A write fenced on a worker's epoch (heartbeat.Fence) applies while the
// epoch is current; once a restart ended it, the same fenced write is
// refused with the same error through every frontend (Write returns what
// the batch did on the frontend's own replica), and no replica applies
// it: each has the batches in its log, alike, and no change at their
// indexes.
func TestWriteFencedOnAnEndedEpochIsRefusedAlikeOnEveryReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := withWorkers(t)
		lf := c.Frontend(leader)
		fence := heartbeat.Fence(4, c.Worker(4).Epoch())
		fenced := func(path string) catalog.Batch {
			return catalog.Batch{Ops: []catalog.Op{fence, {Type: catalog.OpCreate, Path: path, Kind: "write"}}}
		}
		_, err := c.Frontend(followers[0]).Write(ctx, fenced("/current"))
		require.NoError(t, err, "the fence passes while the epoch is current")

		_, err = c.RestartWorker(ctx, 4)
		require.NoError(t, err)
		ws := watchAll(t, c)
		var refused []string
		var at []uint64
		for i := 1; i <= 3; i++ {
			res, err := c.Frontend(i).Write(ctx, fenced(fmt.Sprintf("/fenced-%d", i)))
			require.ErrorIs(t, err, catalog.ErrConflict, "through frontend %d", i)
			var oe *catalog.OpError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, heartbeat.MemberPath(4), oe.Path, "the fence fails")
			refused = append(refused, err.Error())
			at = append(at, res.Index)
		}
		require.Equal(t, []string{refused[0], refused[0], refused[0]}, refused, "one error through every frontend")

		last := marker(ctx, t, lf, "/marker")
		var logged [][]byte
		for i, w := range ws {
			f := c.Frontend(i)
			for ev, err := w.Next(ctx); ; ev, err = w.Next(ctx) {
				require.NoError(t, err)
				require.NotContains(t, at, ev.Index, "frontend %d applied a fenced write: %v %s", i, ev.Op, eventPath(ev))
				if ev.Index == last {
					break
				}
			}
			for k, x := range at {
				_, ok := f.Tree().Get(fmt.Sprintf("/fenced-%d", k+1))
				require.False(t, ok)
				require.NoError(t, f.Journal().ReadEntries(ctx, x-1, x, func(_ uint64, data []byte) error {
					if len(logged) <= k {
						logged = append(logged, data)
					}
					require.Equal(t, logged[k], data, "frontend %d logs the fenced batch at %d alike", i, x)
					return nil
				}))
			}
		}
		require.Len(t, logged, len(at), "every fenced batch is in the log")
	})
}

// A frontend that falls behind a compacted log installs the leader's
// newest image, which holds a worker's owned nodes of an epoch still
// current at the image; the epoch ended after it. The nodes go when the
// frontend applies the transition from the log after the image, at the
// transition's index, as on the others: the image carries the ownership.
func TestFrontendInstallingAnImageWithOwnedNodesEndsThemAtTheTransitionAfterIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := threeWithLeaderIn(t, Options{Frontends: 3, Workers: 2,
			Config: frontend.Config{CompactMargin: 10, CheckpointEntries: 1 << 40, CheckpointInterval: time.Hour}})
		lf, lagging := c.Frontend(leader), followers[1]
		lag := c.Frontend(lagging)
		ownTasks(ctx, t, c, lf, 4, 5)
		w := lag.Tree().Watch(catalog.WatchOptions{})
		defer w.Close()
		c.Partition(lagging, leader, followers[0])
		behind := lag.Journal().Status().Applied

		// Two images: the second compacts the log up to the first, past
		// what the lagging frontend has. Both hold the owned nodes.
		var image uint64
		for k := range 2 {
			for n := range 15 {
				marker(ctx, t, lf, fmt.Sprintf("/filler-%d-%d", k, n))
			}
			info, err := lf.Checkpointer().Checkpoint(ctx)
			require.NoError(t, err)
			image = info.Index
		}
		first, err := lf.Journal().FirstIndex()
		require.NoError(t, err)
		require.Greater(t, first, behind+1, "the lagging frontend needs an image")

		// Then the worker dies: its epoch ends after the newest image.
		c.StopWorker(4)
		require.NoError(t, c.await(ctx, "the leader applies the death", func() bool { _, ok := lf.Tree().Get(goneTask); return !ok }))
		m, _ := lf.Members().Member(4)
		end := m.Modified
		require.Greater(t, end, image)

		c.Heal()
		require.NoError(t, lag.Journal().WaitApplied(ctx, end))
		ev, err := w.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, catalog.OpResync, ev.Op, "the lagging frontend's next change is the image's install")
		require.LessOrEqual(t, ev.Index, image)
		idx, err := lag.Images().Indexes()
		require.NoError(t, err)
		require.Contains(t, idx, image, "the lagging frontend installed the leader's newest image")
		installed := lag.NewTree()
		info, err := lag.Images().LoadAtOrBefore(ctx, installed, image)
		require.NoError(t, err)
		require.Equal(t, image, info.Index)
		for _, p := range []string{goneTask, keptTask} {
			o, ok := installed.Owned(p)
			require.True(t, ok, "the image holds %s, owned", p)
			require.Equal(t, heartbeat.MemberPath(4), o.Path)
		}

		// The log after the image, as the lagging frontend applied it: the
		// transition ends the owned nodes in its own apply.
		var after []catalog.Event
		rw, err := lag.Tree().WatchFrom(ctx, image, catalog.WatchOptions{}, lag.History(), func(ev catalog.Event) error {
			after = append(after, ev)
			return nil
		})
		require.NoError(t, err)
		rw.Close()
		var e ending
		for _, ev := range after {
			switch path := eventPath(ev); {
			case path == heartbeat.MemberPath(4):
				e.record = ev.Index
			case path == goneTask && ev.Op == catalog.OpDelete:
				e.gone = ev.Index
			case path == goneKid && ev.Op == catalog.OpDelete:
				e.kid = ev.Index
			case path == keptTask:
				e.kept, e.keptMark = ev.Index, markIndex(t, ev.After)
			}
		}
		require.Equal(t, end, requireOneIndex(t, e))
		_, ok := lag.Tree().Get(goneTask)
		require.False(t, ok)
		kept, _ := lag.Tree().Get(keptTask)
		require.Equal(t, end, markIndex(t, &kept))
		require.Equal(t, 1, catalogtest.OwnedCount(lag.Tree()), "another worker's owned node stays")
	})
}

// A worker cut off from every frontend past the death bound is declared
// dead; its process was never restarted and answers again with the epoch
// it was declared dead with. That epoch ended in the log and never becomes
// current again, also when the leader that journaled the death crashed
// before the worker came back: through every frontend, a write fenced on
// it and a create owned by it are refused alike and applied by no
// replica, and the owned nodes the death ended stay gone. The worker is
// told that its epoch ended and works again with a fresh one, recorded
// as a restart: a query registered against it is not cancelled by the
// return.
func TestWorkerDeclaredDeadThatComesBackWithItsEpochIsFencedOnEveryReplica(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash bool // the leader that journaled the death crashes before the return
	}{{"same leader", false}, {"leader crashed after the death", true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, ctx, leader, followers := threeWithLeaderIn(t, Options{Frontends: 3, Workers: 2, InMemory: true})
				ownTasks(ctx, t, c, c.Frontend(leader), 4, 5)
				w := c.Worker(4)
				old := w.Epoch()
				q, err := c.StartQuery(ctx, followers[0], 4)
				require.NoError(t, err)
				defer q.Finish()

				c.Network().Partition(WorkerAddr(4), Addr(1), Addr(2), Addr(3))
				ce := requireCancelled(t, ctx, q.Context(), cancel.ErrNodeDead, 4)
				death := ce.Index
				var dead heartbeat.Member
				for _, f := range c.running() {
					// The membership replays the record after the tree applies it.
					require.NoError(t, c.await(ctx, fmt.Sprintf("frontend %d replays the death", f.ID()), func() bool {
						m, _ := f.Members().Member(4)
						return m.Modified >= death
					}))
					m, _ := f.Members().Member(4)
					require.Equal(t, heartbeat.StatusDead, m.Status, "frontend %d", f.ID())
					require.Equal(t, old, m.Epoch)
					dead = m
				}
				if tc.crash {
					require.NoError(t, c.Crash(leader))
					_, err := c.RestartFrontend(ctx, leader)
					require.NoError(t, err)
				}

				c.Heal()
				require.NoError(t, c.AwaitWorker(ctx, 4))
				// The ended epoch, through every frontend.
				fence := heartbeat.Fence(4, old)
				check, owner := heartbeat.OwnerOf(4, old, false)
				var refused []string
				var at []uint64
				for i := 1; i <= 3; i++ {
					f := c.Frontend(i)
					res, err := f.Write(ctx, catalog.Batch{Ops: []catalog.Op{fence, {Type: catalog.OpCreate, Path: fmt.Sprintf("/fenced-%d", i), Kind: "write"}}})
					require.ErrorIs(t, err, catalog.ErrConflict, "a write fenced on the ended epoch, through frontend %d", i)
					var oe *catalog.OpError
					require.ErrorAs(t, err, &oe)
					require.Equal(t, heartbeat.MemberPath(4), oe.Path, "the fence fails")
					refused = append(refused, err.Error())
					at = append(at, res.Index)
					res, err = f.Write(ctx, catalog.Batch{Ops: []catalog.Op{check, {Type: catalog.OpCreate, Path: fmt.Sprintf("/tasks/late-%d", i), Kind: "task", Owner: owner}}})
					require.ErrorIs(t, err, catalog.ErrConflict, "a create owned by the ended epoch, through frontend %d", i)
					refused = append(refused, err.Error())
					at = append(at, res.Index)
				}
				for k := 2; k < len(refused); k++ {
					require.Equal(t, refused[k%2], refused[k], "one error through every frontend")
				}

				require.Same(t, w, c.Worker(4), "the same process")
				fresh := w.Epoch()
				require.NotEqual(t, old, fresh, "the worker works with a fresh epoch")
				lf := c.Frontend(leader)
				if tc.crash {
					l, err := c.Leader(ctx)
					require.NoError(t, err)
					lf = c.Frontend(l)
				}
				m, _ := lf.Members().Member(4)
				require.Equal(t, fresh, m.Epoch)
				require.Equal(t, dead.Generation+1, m.Generation, "one transition after the death: the return, as a restart")
				again, err := c.StartQuery(ctx, followers[1], 4)
				require.NoError(t, err)
				defer again.Finish()

				// The fresh epoch works.
				check, owner = heartbeat.OwnerOf(4, fresh, false)
				_, err = lf.Write(ctx, catalog.Batch{Ops: []catalog.Op{heartbeat.Fence(4, fresh), check, {Type: catalog.OpCreate, Path: "/tasks/new", Kind: "task", Owner: owner}}})
				require.NoError(t, err, "the fresh epoch fences and owns")
				last := marker(ctx, t, lf, "/marker")
				logged := map[uint64][]byte{}
				for _, f := range c.running() {
					require.NoError(t, f.Journal().WaitApplied(ctx, last))
					for _, x := range at {
						require.NoError(t, f.Journal().ReadEntries(ctx, x-1, x, func(_ uint64, data []byte) error {
							if logged[x] == nil {
								logged[x] = data
							}
							require.Equal(t, logged[x], data, "frontend %d logs the refused batch at %d alike", f.ID(), x)
							return nil
						}))
					}
					for i := 1; i <= 3; i++ {
						for _, p := range []string{fmt.Sprintf("/fenced-%d", i), fmt.Sprintf("/tasks/late-%d", i)} {
							_, ok := f.Tree().Get(p)
							require.False(t, ok, "frontend %d applied %s", f.ID(), p)
						}
					}
					_, ok := f.Tree().Get(goneTask)
					require.False(t, ok, "frontend %d: the owned node the death ended stays gone", f.ID())
					kept, ok := f.Tree().Get(keptTask)
					require.True(t, ok)
					require.Equal(t, death, markIndex(t, &kept), "frontend %d: the orphan mark names the death", f.ID())
					require.Equal(t, 2, catalogtest.OwnedCount(f.Tree()), "frontend %d: worker 5's task and the fresh epoch's", f.ID())
					o, ok := f.Tree().Owned("/tasks/new")
					require.True(t, ok)
					rec, _ := f.Tree().Get(heartbeat.MemberPath(4))
					require.Equal(t, rec.Modified, o.Version, "frontend %d: owned by the record's current version", f.ID())
					m, _ := f.Members().Member(4)
					require.Equal(t, heartbeat.StatusAlive, m.Status)
					require.Equal(t, fresh, m.Epoch, "frontend %d", f.ID())
				}
				require.Len(t, logged, len(at), "every refused batch is in the log")
				require.NoError(t, again.Context().Err(), "a query against the fresh epoch runs on")
			})
		})
	}
}
