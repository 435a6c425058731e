package journal_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/clock"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// The removal-check tests run in a synctest bubble on the in-memory
// network: time moves only once every goroutine waits, so a message sent
// at an instant is stepped at that instant (or after the delay its link
// is given), however loaded the machine is.
const (
	removalTick          = 10 * time.Millisecond
	removalElectionTicks = 20
)

// stallClock is a node's clock whose readings run ahead of the bubble's
// time by a settable amount, while its tickers and timers run with the
// bubble: what the node sees after its loop stalled (a GC pause, a
// starved CPU) is time that passed without its ticks.
type stallClock struct {
	clock.Real
	ahead atomic.Int64
}

func (c *stallClock) Now() time.Time { return c.Real.Now().Add(time.Duration(c.ahead.Load())) }

// A healthy voter counts as reachable for the removal check at every
// moment, including just after one of raft's check-quorum rounds (which
// clear Progress.RecentActive for every peer until its next heartbeat
// response, here half a tick later on every link): removing one of three
// healthy voters is allowed at every quarter tick through five rounds.
func TestRemovalCheckSeesHealthyPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, TickInterval: removalTick, ElectionTicks: removalElectionTicks})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		lj := c.Node(leader).Journal()
		_, _, err = lj.Propose(ctx, []byte("x"))
		require.NoError(t, err)
		// Past one heartbeat round: every follower has answered one.
		time.Sleep(removalTick)
		synctest.Wait()
		c.Net.Delay(0, 0, removalTick/2, 0)
		removed := leader%3 + 1
		const step = removalTick / 4
		for at := step; at <= 5*removalElectionTicks*removalTick; at += step {
			time.Sleep(step)
			synctest.Wait()
			require.True(t, lj.Status().IsLeader(), "%v after the start", at)
			require.NoError(t, lj.CheckRemovalForTest(ctx, removed), "%v after the start", at)
		}
	})
}

// A leader whose loop stalled for longer than an election timeout (its
// clock moved on, its ticks did not come, so it sent no heartbeat and
// stepped no answer meanwhile) still counts the followers it heard from
// within its last election timeout of ticks as reachable: removing one
// of three healthy voters is allowed at once, not refused because the
// answers to heartbeats it did not send are missing.
func TestRemovalCheckIsNotFooledByALeaderStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clocks := map[uint64]*stallClock{}
		c := journaltest.NewCluster(t, journaltest.Options{
			Voters: 3, TickInterval: removalTick, ElectionTicks: removalElectionTicks,
			Configure: func(cfg *journal.Config) {
				if clocks[cfg.ID] == nil {
					clocks[cfg.ID] = &stallClock{}
				}
				cfg.Clock = clocks[cfg.ID]
			},
		})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		lj := c.Node(leader).Journal()
		_, _, err = lj.Propose(ctx, []byte("x"))
		require.NoError(t, err)
		time.Sleep(removalTick)
		synctest.Wait()
		// Three election timeouts pass on the leader's clock with no tick.
		clocks[leader].ahead.Add(int64(3 * removalElectionTicks * removalTick))
		removed := leader%3 + 1
		require.NoError(t, lj.CheckRemovalForTest(ctx, removed))
		require.NoError(t, lj.RemoveMember(ctx, removed, false))
		require.Len(t, lj.Status().Members, 2)
	})
}

// With one of three voters cut off for longer than an election timeout of
// the leader's ticks, removing another (reachable) voter would leave a
// configuration without a reachable quorum: refused, with the leader's
// reason said once, also when asked through the observer. Within half an
// election timeout of the cut the voter still counts, and removing the
// cut-off voter itself is allowed throughout.
func TestRemovalCheckRefusesLeavingNoReachableQuorum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Observers: 1, TickInterval: removalTick, ElectionTicks: removalElectionTicks})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		lj := c.Node(leader).Journal()
		_, _, err = lj.Propose(ctx, []byte("x"))
		require.NoError(t, err)
		time.Sleep(removalTick)
		synctest.Wait()
		var followers []uint64
		for id := uint64(1); id <= 3; id++ {
			if id != leader {
				followers = append(followers, id)
			}
		}
		down, up := followers[0], followers[1]
		c.Net.Isolate(down)

		time.Sleep(removalElectionTicks / 2 * removalTick)
		synctest.Wait()
		require.NoError(t, lj.CheckRemovalForTest(ctx, up), "half an election timeout after the cut")
		require.NoError(t, lj.CheckRemovalForTest(ctx, down))

		time.Sleep(removalElectionTicks * removalTick)
		synctest.Wait()
		require.True(t, lj.Status().IsLeader())
		require.ErrorIs(t, lj.CheckRemovalForTest(ctx, up), journal.ErrUnsafeRemoval, "1.5 election timeouts after the cut")
		err = c.Node(4).Journal().RemoveMember(ctx, up, false) // through the observer
		require.ErrorIs(t, err, journal.ErrUnsafeRemoval)
		require.Equal(t, 1, strings.Count(err.Error(), "unsafe member removal"), "the leader's reason, said once: %v", err)
		require.ErrorContains(t, err, "below a quorum")
		require.NoError(t, c.Node(up).Journal().RemoveMember(ctx, down, false))
		require.Len(t, lj.Status().Members, 3, "the cut-off voter is gone, the other voter stays")
	})
}
