package journal

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/clock"
)

// jumpClock is a machine's clock: its monotonic time runs with the real
// one plus a settable advance, and its wall clock can jump apart from it.
type jumpClock struct {
	clock.Real
	origin  time.Time
	advance atomic.Int64 // added to the monotonic time (and so to the wall)
	jump    atomic.Int64 // added to the wall time only
}

func newJumpClock() *jumpClock { return &jumpClock{origin: time.Now()} }

func (c *jumpClock) Monotonic() time.Duration {
	return c.Real.Now().Sub(c.origin) + time.Duration(c.advance.Load())
}

// Now is the wall time: stripped of Go's monotonic reading, as a wall
// clock read after a jump is.
func (c *jumpClock) Now() time.Time {
	return c.origin.Add(c.Monotonic() + time.Duration(c.jump.Load())).Round(0)
}

// TestClockJumpsNeitherStaleNorHide: the wall clock of the leader or of a
// follower jumping ten minutes forward or back leaves a caught-up follower
// fresh, and a follower cut off from the leader still goes stale once
// StaleAfter has passed on its monotonic clock, whatever its wall clock
// says.
func TestClockJumpsNeitherStaleNorHide(t *testing.T) {
	const staleAfter = 3 * time.Second
	clocks := map[uint64]*jumpClock{1: newJumpClock(), 2: newJumpClock(), 3: newJumpClock()}
	c := clockCluster(t, clocks, staleAfter)
	leader := c.nodes[c.waitLeader(1)]
	caughtUp := func(what string) {
		t.Helper()
		idx := propose(t, leader, what)
		for id := uint64(2); id <= 3; id++ {
			f := c.nodes[id]
			require.NoError(t, f.j.WaitApplied(ctxT(t, 5*time.Second), idx))
			require.NoError(t, f.j.CheckFresh(), "%s: node %d is caught up", what, id)
		}
	}
	caughtUp("before any jump")

	for _, jump := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		clocks[2].jump.Store(int64(jump))
		caughtUp("follower 2 jumped " + jump.String())
		clocks[2].jump.Store(0)
		clocks[1].jump.Store(int64(jump))
		caughtUp("leader jumped " + jump.String())
		clocks[1].jump.Store(0)
	}

	// Cut follower 3 off, set its wall clock back (which would make an old
	// timestamp look new) and the leader's forward, and let StaleAfter pass
	// on its monotonic clock: it is stale.
	c.partition(3)
	clocks[3].jump.Store(int64(-10 * time.Minute))
	clocks[1].jump.Store(int64(10 * time.Minute))
	clocks[3].advance.Add(int64(2 * staleAfter))
	require.ErrorIs(t, c.nodes[3].j.CheckFresh(), ErrStale, "a cut-off follower is stale whatever its wall clock says")
}

// clockCluster starts three voters, node i on clocks[i], node 1 the
// bootstrap node.
func clockCluster(t *testing.T, clocks map[uint64]*jumpClock, staleAfter time.Duration) *cluster {
	t.Helper()
	c := newCluster(t)
	n1 := c.listen(1)
	require.NoError(t, c.open(n1, func(cfg *Config) {
		cfg.Bootstrap = true
		cfg.Clock = clocks[1]
		cfg.StaleAfter = staleAfter
	}))
	c.waitLeader(1)
	for id := uint64(2); id <= 3; id++ {
		n := c.listen(id)
		require.NoError(t, c.open(n, func(cfg *Config) {
			cfg.Join = n1.addr
			cfg.Clock = clocks[id]
			cfg.StaleAfter = staleAfter
		}))
	}
	return c
}
