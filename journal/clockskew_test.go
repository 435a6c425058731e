package journal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClockSkewWithinToleranceIsHarmless: nodes whose wall clocks
// disagree by less than StaleAfter (here a follower StaleAfter/3 ahead of
// the leader and one StaleAfter/3 behind, set before Open, as the skew of
// two machines is) behave as if their clocks agreed: caught up, both are
// fresh; cut off, both are still fresh at first and stale once StaleAfter
// plus the skew has passed on their monotonic clocks.
func TestClockSkewWithinToleranceIsHarmless(t *testing.T) {
	const staleAfter = 6 * time.Second
	const skew = staleAfter / 3
	clocks := map[uint64]*jumpClock{1: newJumpClock(), 2: newJumpClock(), 3: newJumpClock()}
	clocks[2].jump.Store(int64(skew))
	clocks[3].jump.Store(int64(-skew))
	c := clockCluster(t, clocks, staleAfter)
	leader := c.nodes[c.waitLeader(1)]
	require.Equal(t, uint64(1), leader.id, "the leader is the node whose clock the skews are measured from")
	for _, what := range []string{"first write", "second write"} {
		idx := propose(t, leader, what)
		for id := uint64(2); id <= 3; id++ {
			f := c.nodes[id]
			require.NoError(t, f.j.WaitApplied(ctxT(t, 5*time.Second), idx))
			require.NoError(t, f.j.CheckFresh(), "%s: node %d, skewed %v, is caught up", what, id, time.Duration(clocks[id].jump.Load()))
		}
	}

	c.partition(2)
	c.partition(3)
	for id := uint64(2); id <= 3; id++ {
		require.NoError(t, c.nodes[id].j.CheckFresh(), "node %d just cut off is not stale yet", id)
	}
	for id := uint64(2); id <= 3; id++ {
		clocks[id].advance.Add(int64(staleAfter + skew))
		require.ErrorIs(t, c.nodes[id].j.CheckFresh(), ErrStale, "node %d, skewed %v, cut off for StaleAfter plus the skew", id, time.Duration(clocks[id].jump.Load()))
	}
}
