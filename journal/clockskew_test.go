package journal_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// TestClockSkewWithinToleranceIsHarmless: nodes whose wall clocks
// disagree by less than StaleAfter (here a follower StaleAfter/3 ahead of
// the leader and one StaleAfter/3 behind, set before Open, as the skew of
// two machines is) behave as if their clocks agreed: caught up, both are
// fresh; cut off, both are still fresh at first and stale once StaleAfter
// plus the skew has passed on their monotonic clocks.
func TestClockSkewWithinToleranceIsHarmless(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const staleAfter = 6 * time.Second
		const skew = staleAfter / 3
		clocks := map[uint64]*jumpClock{1: newJumpClock(), 2: newJumpClock(), 3: newJumpClock()}
		clocks[2].jump.Store(int64(skew))
		clocks[3].jump.Store(int64(-skew))
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Configure: func(cfg *journal.Config) {
			cfg.Clock = clocks[cfg.ID]
			cfg.StaleAfter = staleAfter
		}})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(1), leader, "the leader is the node whose clock the skews are measured from")
		for _, what := range []string{"first write", "second write"} {
			idx := proposeVia(ctx, t, c.Node(1), what)
			for id := uint64(2); id <= 3; id++ {
				f := c.Node(id).Journal()
				require.NoError(t, f.WaitApplied(ctx, idx))
				require.NoError(t, f.CheckFresh(), "%s: node %d, skewed %v, is caught up", what, id, time.Duration(clocks[id].jump.Load()))
			}
		}

		c.Net.Partition([]uint64{1}, []uint64{2}, []uint64{3})
		for id := uint64(2); id <= 3; id++ {
			require.NoError(t, c.Node(id).Journal().CheckFresh(), "node %d just cut off is not stale yet", id)
		}
		// Past StaleAfter plus the skew by a tick: on the bubble's clock
		// no time passes between the last write and here.
		for id := uint64(2); id <= 3; id++ {
			clocks[id].advance.Add(int64(staleAfter + skew + bubbleTick))
			require.ErrorIs(t, c.Node(id).Journal().CheckFresh(), journal.ErrStale, "node %d, skewed %v, cut off for StaleAfter plus the skew", id, time.Duration(clocks[id].jump.Load()))
		}
	})
}
