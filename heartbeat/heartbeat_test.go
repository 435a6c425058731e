package heartbeat_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/heartbeattest"
	"github.com/metatree/metatree/heartbeat/responder"
)

func synctestWait() { synctest.Wait() }

// A worker restart cancels its queries on whichever frontend coordinates
// them (the leader and a follower), within one interval of the new epoch
// being answered; queries elsewhere go on.
func TestWorkerRestartCancelsQueriesOnEveryFrontend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 2)
		var onLeader, onFollower, elsewhere *cancel.Query
		var err error
		f1, f2 := c.frontends[1], c.frontends[2]
		onLeader, err = f1.reg.Register(t.Context(), member(f1.ms, 1), []cancel.Member{member(f1.ms, 10)})
		require.NoError(t, err)
		onFollower, err = f2.reg.Register(t.Context(), member(f2.ms, 2), []cancel.Member{member(f2.ms, 10), member(f2.ms, 11)})
		require.NoError(t, err)
		elsewhere, err = f2.reg.Register(t.Context(), member(f2.ms, 2), []cancel.Member{member(f2.ms, 11)})
		require.NoError(t, err)
		old := c.workers[10].epoch

		time.Sleep(interval / 3) // mid-interval, like a real crash
		w := c.restartWorker(10)
		c.advance(interval)
		for _, q := range []*cancel.Query{onLeader, onFollower} {
			requireCancelled(t, q, cancel.ErrNodeRestarted, 10)
			var ce *cancel.CanceledError
			require.ErrorAs(t, context.Cause(q.Context()), &ce)
			require.Equal(t, old, ce.OldEpoch)
			require.Equal(t, w.epoch, ce.NewEpoch)
		}
		require.NoError(t, elsewhere.Context().Err())
		for _, f := range c.frontends {
			require.Equal(t, 1, countType(f.events(), 10, epoch.Restarted), "frontend %d", f.id)
			m, _ := f.ms.Member(10)
			require.Equal(t, w.epoch, m.Epoch)
		}
		// A query against the old epoch is refused at once; the new one is fine.
		_, err = f2.reg.Register(t.Context(), member(f2.ms, 2), []cancel.Member{{Node: 10, Epoch: old}})
		require.ErrorIs(t, err, cancel.ErrNodeRestarted)
		_, err = f2.reg.Register(t.Context(), member(f2.ms, 2), []cancel.Member{member(f2.ms, 10)})
		require.NoError(t, err)
	})
}

// A worker that stops answering is declared dead after DeadAfter misses,
// not before, and its queries are cancelled then.
func TestWorkerDeathCancelsAfterNMisses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 2)
		f2 := c.frontends[2]
		q, err := f2.reg.Register(t.Context(), member(f2.ms, 2), []cancel.Member{member(f2.ms, 10)})
		require.NoError(t, err)

		time.Sleep(interval / 3)
		c.net.cut("*", addrOf(10), true) // the process hangs: no answer at all
		c.advance(time.Duration(deadAfter-1) * interval)
		require.NoError(t, q.Context().Err(), "cancelled before %d misses", deadAfter)
		c.advance(2 * interval)
		requireCancelled(t, q, cancel.ErrNodeDead, 10)
		m, _ := f2.ms.Member(10)
		require.Equal(t, heartbeat.StatusDead, m.Status)
		require.Equal(t, 1, countType(f2.events(), 10, epoch.Dead))
		alive := countType(f2.events(), 10, epoch.Alive) // its first answer
		old := c.workers[10].resp.Epoch()

		// The same process comes back (it was only cut off): told that its
		// epoch ended, it answers with a fresh one, recorded as a restart.
		// New queries are accepted against it, none against the ended one.
		c.net.cut("*", addrOf(10), false)
		c.advance(2 * interval)
		m, _ = f2.ms.Member(10)
		require.Equal(t, heartbeat.StatusAlive, m.Status)
		require.NotEqual(t, old, m.Epoch)
		require.Equal(t, c.workers[10].resp.Epoch(), m.Epoch)
		require.Equal(t, alive, countType(f2.events(), 10, epoch.Alive))
		require.Equal(t, 1, countType(f2.events(), 10, epoch.Restarted))
		_, err = f2.reg.Register(t.Context(), member(f2.ms, 2), []cancel.Member{member(f2.ms, 10)})
		require.NoError(t, err)
		_, err = f2.reg.Register(t.Context(), member(f2.ms, 2), []cancel.Member{{Node: 10, Epoch: old}})
		require.ErrorIs(t, err, cancel.ErrNodeRestarted)
	})
}

// A coordinator frontend's restart cancels the fragments it sent to
// workers; a fragment from another frontend goes on.
func TestCoordinatorRestartCancelsFragments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 1)
		w := c.workers[10]
		old := c.frontends[2].epoch
		frag, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 2, Epoch: old})
		require.NoError(t, err)
		other, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 3, Epoch: c.frontends[3].epoch})
		require.NoError(t, err)

		f := c.restartFrontend(2)
		c.advance(2 * interval) // one round journals it, the next publishes it
		requireCancelled(t, frag, cancel.ErrNodeRestarted, 2)
		require.NoError(t, other.Context().Err())
		fe, ok := w.resp.Frontend(2)
		require.True(t, ok)
		require.Equal(t, f.epoch, fe.Epoch)
		require.NotZero(t, fe.Since, "the leader's lists carry the record's creation index")
		// A late fragment from the old coordinator epoch never starts.
		_, err = w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 2, Epoch: old})
		require.ErrorIs(t, err, cancel.ErrNodeRestarted)
	})
}

// A leader whose commits take longer than a heartbeat interval (a sole
// voter on a slow disk) still claims the monitor and journals
// transitions, each once: when it restarts, the workers hear its new
// epoch and cancel the fragments of its old process.
func TestSlowCommitsStillPublishARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1, 1)
		w := c.workers[10]
		frag, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 1, Epoch: c.frontends[1].epoch})
		require.NoError(t, err)

		c.log.SlowCommits(interval + interval*6/10)
		before := c.log.Index()
		f := c.restartFrontend(1)
		c.advance(10 * interval)
		entries := c.log.Index() - before
		requireCancelled(t, frag, cancel.ErrNodeRestarted, 1)
		fe, ok := w.resp.Frontend(1)
		require.True(t, ok)
		require.Equal(t, f.epoch, fe.Epoch)
		require.Positive(t, heartbeattest.StatsOf(f.ms).Transitions, "the restarted leader journaled no transition")
		// Its claim and its own restart, each proposed once: a transition
		// waiting for its commit is not proposed again meanwhile.
		require.Equal(t, uint64(2), entries)
	})
}

// One answer from a member's process that started before the one its
// record shows (a late answer of a process since replaced) changes
// nothing: the record keeps the newer epoch and no query on it is
// cancelled. A process that keeps answering with such an epoch (a
// restart whose clock stepped back) is recorded at its second answer.
func TestLateAnswerFromAnOlderProcessIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1, 1)
		old := c.workers[10]
		w := c.restartWorker(10)
		c.advance(2 * interval)
		rec, _ := c.frontends[1].ms.Member(10)
		require.Equal(t, w.epoch, rec.Epoch)
		q, err := c.frontends[1].reg.Register(t.Context(), member(c.frontends[1].ms, 1), []cancel.Member{member(c.frontends[1].ms, 10)})
		require.NoError(t, err)

		c.net.set(w.addr, old.resp)
		c.advance(interval)
		c.net.set(w.addr, w.resp)
		c.advance(3 * interval)
		require.NoError(t, q.Context().Err(), "a late answer of the replaced process cancelled the query")
		rec, _ = c.frontends[1].ms.Member(10)
		require.Equal(t, w.epoch, rec.Epoch)
		require.Equal(t, 1, countType(c.frontends[1].events(), 10, epoch.Restarted))

		c.net.set(w.addr, old.resp)
		c.advance(3 * interval)
		requireCancelled(t, q, cancel.ErrNodeRestarted, 10)
		rec, _ = c.frontends[1].ms.Member(10)
		require.Equal(t, old.epoch, rec.Epoch, "a process answering again and again is recorded")
	})
}

// A member record says at which generation its epoch was recorded: a
// restart records it, a death keeps it, and the return after a death
// records the fresh epoch it comes with.
func TestRecordKeepsTheGenerationItsEpochWasRecordedAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1, 1)
		ms := c.frontends[1].ms
		w := c.restartWorker(10)
		c.advance(2 * interval)
		rec, ok := ms.Member(10)
		require.True(t, ok)
		require.Equal(t, w.epoch, rec.Epoch)
		require.Equal(t, rec.Generation, rec.EpochGeneration, "a restart records the epoch")
		recorded := rec.EpochGeneration

		c.net.cut("*", w.addr, true)
		c.advance(time.Duration(deadAfter+2) * interval)
		rec, _ = ms.Member(10)
		require.Equal(t, heartbeat.StatusDead, rec.Status)
		require.Equal(t, recorded, rec.EpochGeneration, "a death keeps it")

		c.net.cut("*", w.addr, false)
		c.advance(2 * interval)
		rec, _ = ms.Member(10)
		require.Equal(t, heartbeat.StatusAlive, rec.Status)
		require.NotEqual(t, w.epoch, rec.Epoch, "a return after a death comes with a fresh epoch")
		require.Equal(t, w.resp.Epoch(), rec.Epoch)
		require.Equal(t, recorded+2, rec.Generation)
		require.Equal(t, rec.Generation, rec.EpochGeneration, "the return records its fresh epoch")
	})
}

// A coordinator frontend that dies is published with a temporary epoch once
// declared dead, and its fragments are cancelled then, not before.
func TestCoordinatorDeathCancelsFragments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 1)
		w := c.workers[10]
		e2 := c.frontends[2].epoch
		frag, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 2, Epoch: e2})
		require.NoError(t, err)

		c.net.cut("*", addrOf(2), true)
		c.advance(time.Duration(deadAfter-1) * interval)
		require.NoError(t, frag.Context().Err(), "unreachable is not dead yet")
		fe, _ := w.resp.Frontend(2)
		require.Equal(t, e2, fe.Epoch, "an unreachable frontend keeps its epoch until declared dead")
		c.advance(3 * interval)
		requireCancelled(t, frag, cancel.ErrNodeDead, 2)
		fe, _ = w.resp.Frontend(2)
		require.True(t, fe.Dead)
		require.True(t, fe.Epoch.Temporary())
	})
}

// Removing a member cancels its queries on the frontends, and removing a
// frontend cancels its fragments on the workers.
func TestRemovalCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 2)
		f1 := c.frontends[1]
		q, err := f1.reg.Register(t.Context(), member(f1.ms, 1), []cancel.Member{member(f1.ms, 11)})
		require.NoError(t, err)
		frag, err := c.workers[10].reg.RegisterFragment(t.Context(), cancel.Member{Node: 3, Epoch: c.frontends[3].epoch})
		require.NoError(t, err)

		require.NoError(t, c.frontends[2].ms.Remove(t.Context(), 11)) // through a follower
		require.NoError(t, f1.ms.Remove(t.Context(), 3))
		synctestWait()
		requireCancelled(t, q, cancel.ErrNodeRemoved, 11)
		require.ErrorIs(t, c.frontends[2].ms.Remove(t.Context(), 11), heartbeat.ErrNotFound)
		c.advance(interval)
		requireCancelled(t, frag, cancel.ErrNodeRemoved, 3)
		_, err = f1.reg.Register(t.Context(), member(f1.ms, 1), []cancel.Member{{Node: 11}})
		require.ErrorIs(t, err, cancel.ErrNodeRemoved)
	})
}

// A leader change with every member healthy declares nobody dead and
// cancels nothing.
func TestLeaderFailoverHealthyNoCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 3)
		var qs []*cancel.Query
		for _, f := range c.frontends {
			q, err := f.reg.Register(t.Context(), member(f.ms, f.id), []cancel.Member{member(f.ms, 10), member(f.ms, 11), member(f.ms, 12)})
			require.NoError(t, err)
			qs = append(qs, q)
		}
		for _, w := range c.workers {
			for id := range uint64(3) {
				q, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: id + 1, Epoch: c.frontends[id+1].epoch})
				require.NoError(t, err)
				qs = append(qs, q)
			}
		}
		before, wbefore := map[uint64]int{}, map[uint64]int{}
		for id, f := range c.frontends {
			before[id] = len(f.events())
		}
		for id, w := range c.workers {
			wbefore[id] = len(w.events())
		}
		// No leader for a while (an election), then 2 leads, then 3.
		c.setLeader(0, 2)
		c.advance(2 * interval)
		c.setLeader(2, 2)
		c.advance(5 * interval)
		c.setLeader(3, 3)
		c.advance(5 * interval)
		for _, q := range qs {
			require.NoError(t, q.Context().Err(), "failover cancelled a query: %v", context.Cause(q.Context()))
		}
		for id, f := range c.frontends {
			require.Equal(t, before[id], len(f.events()), "frontend %d saw events: %v", id, f.events()[before[id]:])
		}
		for _, w := range c.workers {
			require.Equal(t, wbefore[w.id], len(w.events()), "worker %d saw events: %v", w.id, w.events()[wbefore[w.id]:])
			require.Equal(t, uint64(3), w.resp.Term())
		}
		require.True(t, heartbeattest.StatsOf(c.frontends[3].ms).Leading)
		require.False(t, heartbeattest.StatsOf(c.frontends[1].ms).Leading)
	})
}

// A deposed leader that still believes it leads is refused by members that
// saw the newer term, and its transitions fail the claim fence.
func TestDeposedLeaderIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 2)
		f2 := c.frontends[2]
		q, err := f2.reg.Register(t.Context(), member(f2.ms, 2), []cancel.Member{member(f2.ms, 10), member(f2.ms, 11)})
		require.NoError(t, err)
		// Frontend 2 becomes leader in term 2; frontend 1 is partitioned from
		// raft and still believes it leads term 1. It also cannot reach
		// worker 10, so it counts misses for it.
		journaled := heartbeattest.StatsOf(c.frontends[1].ms).Transitions
		c.log.SetLease(2, 2, true)
		c.advance(interval) // 2 claims the monitor and heartbeats everyone in term 2
		c.net.cut(addrOf(1), addrOf(10), true)
		c.advance(10 * interval)
		require.NoError(t, q.Context().Err(), "a deposed leader's view cancelled a query: %v", context.Cause(q.Context()))
		for _, f := range c.frontends {
			require.Zero(t, countType(f.events(), 10, epoch.Dead))
			require.Zero(t, countType(f.events(), 11, epoch.Dead))
		}
		require.Equal(t, uint64(2), c.workers[11].resp.Term(), "worker accepted a lower term")
		require.Equal(t, journaled, heartbeattest.StatsOf(c.frontends[1].ms).Transitions, "the deposed leader journaled a transition")
		require.Positive(t, heartbeattest.StatsOf(c.frontends[1].ms).Misses, "the deposed leader never tried (test is vacuous)")
	})
}

// A member answering slowly but within the timeout is never declared dead.
func TestSlowResponderNeverDead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 1)
		c.net.slow(addrOf(10), interval/2-time.Millisecond) // the timeout is interval/2
		c.advance(20 * interval)
		for _, f := range c.frontends {
			require.Zero(t, countType(f.events(), 10, epoch.Dead))
			m, _ := f.ms.Member(10)
			require.Equal(t, heartbeat.StatusAlive, m.Status)
		}
		require.Zero(t, heartbeattest.StatsOf(c.frontends[1].ms).Misses)
		// Past the timeout it is a miss, and enough of them convict.
		c.net.slow(addrOf(10), interval/2+time.Millisecond)
		c.advance(5 * interval)
		require.Equal(t, 1, countType(c.frontends[2].events(), 10, epoch.Dead))
	})
}

// A worker cut off from every frontend cancels nothing on its own: silence
// is not evidence. (The leader, which can no longer reach it, declares it
// dead, and the coordinators cancel their side.)
func TestWorkerCutOffCancelsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, 1)
		w := c.workers[10]
		var frags []*cancel.Query
		for id := range uint64(3) {
			q, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: id + 1, Epoch: c.frontends[id+1].epoch})
			require.NoError(t, err)
			frags = append(frags, q)
		}
		before := len(w.events())
		c.net.cut("*", addrOf(10), true)
		c.advance(30 * interval)
		require.True(t, w.resp.Stale())
		require.Equal(t, before, len(w.events()))
		for _, q := range frags {
			require.NoError(t, q.Context().Err())
		}
		require.Equal(t, 1, countType(c.frontends[1].events(), 10, epoch.Dead))
	})
}

// The leader's own pause (its clock jumps between ticks while probes are
// in flight) convicts nobody for the misses that fell in it.
func TestLeaderPauseConvictsNobody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1, 1)
		// Every round, worker 10's answer is lost while the leader is paused:
		// from the leader's point of view its probes time out late.
		clk := c.pausingClock()
		c.restartFrontendWithClock(1, clk)
		c.advance(2 * interval)
		c.net.cut("*", addrOf(10), true)
		for range 10 {
			clk.pause(3 * interval)
			c.advance(interval)
		}
		require.Zero(t, countType(c.frontends[1].events(), 10, epoch.Dead))
	})
}

type follower struct{}

func (follower) Propose(context.Context, []byte) (uint64, any, error) {
	return 0, nil, errors.New("not the leader")
}
func (follower) LeaderTerm() (uint64, bool) { return 1, false }

// A frontend whose catalog is replaced by an image (a lagging follower
// restoring from a peer) delivers the difference as events.
func TestResyncAfterImageLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1, 1)
		tree := catalog.New()
		var evs []epoch.Event
		ms, err := heartbeat.New(heartbeat.Config{ID: 99, Epoch: epoch.New(), Tree: tree, Journal: follower{},
			OnEvent: func(e epoch.Event) { evs = append(evs, e) }})
		require.NoError(t, err)
		defer ms.Close()
		load := func() {
			var buf bytes.Buffer
			require.NoError(t, c.frontends[1].tree.Save(&buf))
			require.NoError(t, tree.Load(&buf))
			synctestWait()
		}
		load()
		require.Len(t, ms.Members(), 2)
		require.Equal(t, 1, countType(evs, 10, epoch.Added))
		old := c.workers[10].epoch
		m, _ := ms.Member(10)
		require.Equal(t, old, m.Epoch)

		w := c.restartWorker(10)
		c.advance(interval)
		load()
		require.Equal(t, 1, countType(evs, 10, epoch.Restarted))
		last := evs[len(evs)-1]
		require.Equal(t, old, last.OldEpoch)
		require.Equal(t, w.epoch, last.NewEpoch)

		require.NoError(t, c.frontends[1].ms.Remove(t.Context(), 10))
		load()
		require.Equal(t, 1, countType(evs, 10, epoch.Removed))
		load() // the same image again: nothing new
		require.Equal(t, 1, countType(evs, 10, epoch.Removed))
	})
}

// A frontend that catches up through an image across a worker's death and
// return (the image holds only the record after both: alive with the
// fresh epoch the worker drew) cancels its queries on that worker, as the
// frontends that replayed the transitions did, and accepts new ones
// against the worker's new epoch.
func TestImageCatchUpAcrossADeathCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1, 1)
		tree := catalog.New()
		reg := cancel.New(cancel.Config{})
		defer reg.Close()
		ms, err := heartbeat.New(heartbeat.Config{ID: 99, Epoch: epoch.New(), Tree: tree, Journal: follower{},
			OnEvent: func(e epoch.Event) { reg.Apply(e) }})
		require.NoError(t, err)
		defer ms.Close()
		load := func() {
			var buf bytes.Buffer
			require.NoError(t, c.frontends[1].tree.Save(&buf))
			require.NoError(t, tree.Load(&buf))
			synctestWait()
		}
		load()
		q, err := reg.Register(t.Context(), cancel.Member{Node: 1}, []cancel.Member{member(ms, 10)})
		require.NoError(t, err)

		c.net.cut("*", addrOf(10), true)
		c.advance((deadAfter + 2) * interval)
		m, _ := c.frontends[1].ms.Member(10)
		require.Equal(t, heartbeat.StatusDead, m.Status, "the leader declared worker 10 dead")
		c.net.cut("*", addrOf(10), false)
		c.advance(interval)
		m, _ = c.frontends[1].ms.Member(10)
		require.Equal(t, heartbeat.StatusAlive, m.Status, "worker 10 is back")

		load()
		requireCancelled(t, q, cancel.ErrNodeDead, 10)
		st, _ := reg.Node(10)
		require.Equal(t, cancel.StatusAlive, st.Status)
		require.Equal(t, c.workers[10].resp.Epoch(), st.Epoch)
		require.NotEqual(t, c.workers[10].epoch, st.Epoch, "the epoch declared dead never comes back")
		_, err = reg.Register(t.Context(), cancel.Member{Node: 1}, []cancel.Member{member(ms, 10)})
		require.NoError(t, err)
	})
}

// A worker cut off from the leader while a coordinator frontend died and
// came back (with a fresh epoch: the one declared dead ended) hears of it
// from the next list: the coordinator's fragments are cancelled, as its
// queries were, and its new epoch's fragments are accepted.
func TestWorkerThatMissedACoordinatorsDeathCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 1)
		w := c.workers[10]
		e2 := c.frontends[2].epoch
		frag, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 2, Epoch: e2})
		require.NoError(t, err)

		c.net.cut("*", addrOf(10), true)
		c.net.cut("*", addrOf(2), true)
		c.advance((deadAfter + 2) * interval)
		m, _ := c.frontends[1].ms.Member(2)
		require.Equal(t, heartbeat.StatusDead, m.Status, "the leader declared frontend 2 dead")
		c.net.cut("*", addrOf(2), false)
		c.advance(interval)
		m, _ = c.frontends[1].ms.Member(2)
		require.Equal(t, heartbeat.StatusAlive, m.Status, "frontend 2 is back")
		fresh := c.frontends[2].ms.Epoch()
		require.NotEqual(t, e2, fresh, "frontend 2 drew a fresh epoch")
		require.Equal(t, fresh, m.Epoch)
		require.NoError(t, frag.Context().Err(), "the worker has heard nothing yet")

		c.net.cut("*", addrOf(10), false)
		c.advance(interval)
		requireCancelled(t, frag, cancel.ErrNodeDead, 2)
		_, err = w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 2, Epoch: e2})
		require.ErrorIs(t, err, cancel.ErrNodeRestarted, "frontend 2's ended epoch sends no fragment")
		_, err = w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 2, Epoch: fresh})
		require.NoError(t, err, "frontend 2 works again with its fresh epoch")
	})
}

// Registrations racing a worker's restart: each query registered against
// the old epoch either fails at once or is cancelled, exactly once; those
// registered against the new epoch go on.
func TestRegistrationRacingRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 1)
		f2 := c.frontends[2]
		var mu sync.Mutex
		cancels := map[*cancel.Query]int{}
		var accepted []*cancel.Query
		var epochs []epoch.Epoch
		rejected := 0
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					st, _ := f2.reg.Node(10)
					var q *cancel.Query
					q, err := f2.reg.Register(t.Context(), member(f2.ms, 2), []cancel.Member{{Node: 10, Epoch: st.Epoch}},
						cancel.OnCancel(func(*cancel.CanceledError) { mu.Lock(); cancels[q]++; mu.Unlock() }))
					mu.Lock()
					if err != nil {
						if !errors.Is(err, cancel.ErrNodeRestarted) {
							t.Errorf("register: %v", err)
						}
						rejected++
					} else {
						accepted = append(accepted, q)
						epochs = append(epochs, st.Epoch)
					}
					mu.Unlock()
					time.Sleep(interval / 50)
				}
			})
		}
		c.advance(interval / 3)
		old := c.workers[10].epoch
		w := c.restartWorker(10)
		c.advance(2 * interval)
		close(stop)
		wg.Wait()
		synctestWait()
		mu.Lock()
		defer mu.Unlock()
		var sawOld, sawNew int
		for i, q := range accepted {
			switch epochs[i] {
			case old:
				sawOld++
				require.Error(t, q.Context().Err(), "a query on the old epoch escaped")
				require.Equal(t, 1, cancels[q], "cancelled %d times", cancels[q])
			case w.epoch:
				sawNew++
				require.NoError(t, q.Context().Err())
				require.Zero(t, cancels[q])
			default:
				t.Fatalf("registered against epoch %s", epochs[i])
			}
		}
		require.Positive(t, sawOld)
		require.Positive(t, sawNew)
	})
}

// A frontend whose event consumer stalls while the catalog races ahead
// (its watch overflows) re-reads the records and delivers every
// transition exactly once.
func TestResyncAfterWatchOverflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tree := catalog.New()
		release := make(chan struct{})
		added := map[uint64]int{}
		var mu sync.Mutex
		ms, err := heartbeat.New(heartbeat.Config{ID: 99, Epoch: epoch.New(), Tree: tree, Journal: follower{},
			OnEvent: func(e epoch.Event) {
				<-release
				mu.Lock()
				added[e.Node]++
				mu.Unlock()
			}})
		require.NoError(t, err)
		defer ms.Close()
		index := uint64(0)
		apply := func(ops ...catalog.Op) {
			data, err := catalog.Batch{Ops: ops}.Encode()
			require.NoError(t, err)
			index++
			require.NoError(t, tree.Apply(index, data).(*catalog.Result).Err)
		}
		apply(catalog.Op{Type: catalog.OpCreate, Path: heartbeat.ClusterPath, Kind: "cluster"},
			catalog.Op{Type: catalog.OpCreate, Path: heartbeat.MembersPath, Kind: "members"})
		const n = catalog.DefaultWatchBuffer + 200
		for id := uint64(1); id <= n; id++ {
			apply(catalog.Op{Type: catalog.OpCreate, Path: heartbeat.MemberPath(id), Kind: heartbeat.MemberKind, Set: map[string]catalog.Value{
				"kind": catalog.String("worker"), "status": catalog.String("alive"), "addr": catalog.String("w:1")}})
		}
		close(release)
		synctestWait()
		require.Len(t, ms.Members(), n)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, added, n)
		for id, k := range added {
			require.Equal(t, 1, k, "member %d delivered %d times", id, k)
		}
	})
}

// A frontend that starts (or restarts) learns the current member states
// before New returns: its registry refuses work on a dead member at once.
func TestStartSeesCurrentState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2, 2)
		c.net.cut("*", addrOf(11), true)
		c.advance(5 * interval)
		dead := c.workers[11].epoch
		f := c.restartFrontend(2) // a new process: fresh registry, seeded by New
		_, err := f.reg.Register(t.Context(), member(f.ms, 2), []cancel.Member{{Node: 11, Epoch: dead}})
		require.ErrorIs(t, err, cancel.ErrNodeDead)
		st, ok := f.reg.Node(11)
		require.True(t, ok)
		require.Equal(t, cancel.StatusDead, st.Status)
		require.True(t, st.Epoch.Temporary())
		_, err = f.reg.Register(t.Context(), member(f.ms, 2), []cancel.Member{member(f.ms, 10)})
		require.NoError(t, err)
		require.Equal(t, 1, countType(f.events(), 11, epoch.Dead))
	})
}

func TestAddRemoveErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1, 1)
		ms := c.frontends[1].ms
		require.ErrorIs(t, ms.Add(t.Context(), heartbeat.Member{ID: 10, Addr: "x:1", Kind: epoch.KindWorker}), heartbeat.ErrExists)
		require.ErrorIs(t, ms.Add(t.Context(), heartbeat.Member{ID: 0, Addr: "x:1", Kind: epoch.KindWorker}), heartbeat.ErrInvalid)
		require.ErrorIs(t, ms.Add(t.Context(), heartbeat.Member{ID: 12, Kind: epoch.KindWorker}), heartbeat.ErrInvalid)
		require.ErrorIs(t, ms.Remove(t.Context(), 77), heartbeat.ErrNotFound)
		_, err := heartbeat.New(heartbeat.Config{ID: 1, Epoch: epoch.New()})
		require.ErrorIs(t, err, heartbeat.ErrInvalid)
		_, err = heartbeat.New(heartbeat.Config{ID: 1, Tree: catalog.New(), Journal: follower{}})
		require.ErrorIs(t, err, heartbeat.ErrInvalid, "no epoch")
		_, err = heartbeat.New(heartbeat.Config{ID: 1, Epoch: epoch.New(), Tree: catalog.New(), Journal: follower{}, Interval: time.Second, Timeout: 2 * time.Second})
		require.ErrorIs(t, err, heartbeat.ErrInvalid, "timeout over interval")
		_, err = responder.New(responder.Config{ID: 1, Epoch: heartbeattest.TemporaryEpoch(epoch.New(), 1)})
		require.ErrorIs(t, err, heartbeat.ErrInvalid)
		require.NoError(t, ms.Close())
		require.ErrorIs(t, ms.Add(t.Context(), heartbeat.Member{ID: 13, Addr: "x:1", Kind: epoch.KindWorker}), heartbeat.ErrClosed)
	})
}
