package journal_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// TestHandoffLosesNoWrite: writers on the leader and on both followers
// keep proposing while the leader hands off; every write succeeds, none
// waits 500 ms of the bubble's virtual time (two and a half election
// timeouts: a write that waited out an election would), and afterwards
// another voter leads. How fast a hand-off is on a real clock is
// BenchmarkHandoff's figure.
func TestHandoffLosesNoWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{})
		ctx := ctxFor(t, 30*time.Second)
		old, err := c.WaitLeader(ctx)
		require.NoError(t, err)

		var handedOff atomic.Bool
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		longest := make([]time.Duration, 4)
		for id := uint64(1); id <= 3; id++ {
			wg.Go(func() {
				after := 0
				for i := 0; after < 5; i++ {
					if handedOff.Load() {
						after++
					}
					t0 := time.Now()
					_, _, err := c.Node(id).Journal().Propose(ctx, fmt.Appendf(nil, "w%d-%d", id, i))
					longest[id] = max(longest[id], time.Since(t0))
					if err != nil {
						errs <- fmt.Errorf("write %d through node %d: %w", i, id, err)
						return
					}
				}
			})
		}
		require.NoError(t, c.Node(old).Journal().Handoff(ctx))
		handedOff.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		st := c.Node(old).Journal().Status()
		require.False(t, st.IsLeader(), "the old leader handed off")
		require.NotZero(t, st.Leader)
		require.NotEqual(t, old, st.Leader)
		for id := uint64(1); id <= 3; id++ {
			require.Less(t, longest[id], 500*time.Millisecond, "longest write through node %d", id)
		}
	})
}

func TestHandoffOnFollowerOrAloneIsNoOp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{})
		ctx := ctxFor(t, 10*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		follower := leader%3 + 1
		require.NoError(t, c.Node(follower).Journal().Handoff(ctx))
		require.Equal(t, leader, c.Node(follower).Journal().Status().Leader, "a follower's Handoff changes nothing")

		single := journaltest.NewCluster(t, journaltest.Options{Voters: 1})
		j := single.Node(1).Journal()
		require.NoError(t, j.Handoff(ctx))
		require.True(t, j.Status().IsLeader(), "a lone voter keeps leading")
	})
}

// TestPromoteRefusedWhileLagging: an observer cut off while the log grows
// is refused promotion (on the leader and through a follower) until it
// caught up; Progress shows its lag meanwhile.
func TestPromoteRefusedWhileLagging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Observers: 1, Configure: func(cfg *journal.Config) {
			cfg.PromoteMaxLag = 5
		}})
		ctx := ctxFor(t, 30*time.Second)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		follower := leader%3 + 1
		lj := c.Node(leader).Journal()
		c.Net.Isolate(4)
		var last uint64
		for i := range 10 {
			last, _, err = lj.Propose(ctx, fmt.Appendf(nil, "v%d", i))
			require.NoError(t, err)
		}
		prog, err := lj.Progress(ctx)
		require.NoError(t, err)
		require.Len(t, prog, 4)
		require.Equal(t, uint64(4), prog[3].ID)
		require.Equal(t, journal.Observer, prog[3].Role)
		require.GreaterOrEqual(t, prog[3].Lag, uint64(10))
		_, err = c.Node(follower).Journal().Progress(ctx)
		require.ErrorIs(t, err, journal.ErrNotLeader)

		require.ErrorIs(t, lj.Promote(ctx, 4), journal.ErrNotCaughtUp)
		// The follower may trail the quorum: once it has applied the
		// writes, it knows the observer (added before them) too.
		require.NoError(t, c.Node(follower).Journal().WaitApplied(ctx, last))
		require.ErrorIs(t, c.Node(follower).Journal().Promote(ctx, 4), journal.ErrNotCaughtUp, "through a follower too")

		c.Net.Heal()
		require.NoError(t, c.Node(4).Journal().WaitApplied(ctx, last))
		// The observer applies before the leader hears its acknowledgement:
		// promotion is judged by the leader's view of its progress.
		require.Eventually(t, func() bool {
			prog, err := lj.Progress(ctx)
			return err == nil && len(prog) == 4 && prog[3].Lag <= 5
		}, 10*time.Second, time.Millisecond, "the leader learns the observer caught up")
		require.NoError(t, lj.Promote(ctx, 4))
		var role journal.Role
		for _, m := range lj.Status().Members {
			if m.ID == 4 {
				role = m.Role
			}
		}
		require.Equal(t, journal.Follower, role)
	})
}
