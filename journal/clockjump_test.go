package journal_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/clock"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// jumpClock is a machine's clock: its monotonic time runs with the
// bubble's plus a settable advance, and its wall clock can jump apart from
// it.
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
	synctest.Test(t, func(t *testing.T) {
		const staleAfter = 3 * time.Second
		clocks := map[uint64]*jumpClock{1: newJumpClock(), 2: newJumpClock(), 3: newJumpClock()}
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Configure: func(cfg *journal.Config) {
			cfg.Clock = clocks[cfg.ID]
			cfg.StaleAfter = staleAfter
		}})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(1), leader, "the bootstrap node leads")
		caughtUp := func(what string) {
			t.Helper()
			idx := proposeVia(ctx, t, c.Node(1), what)
			for id := uint64(2); id <= 3; id++ {
				f := c.Node(id).Journal()
				require.NoError(t, f.WaitApplied(ctx, idx))
				require.NoError(t, f.CheckFresh(), "%s: node %d is caught up", what, id)
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

		// Cut follower 3 off, set its wall clock back (which would make an
		// old timestamp look new) and the leader's forward, and let
		// StaleAfter pass on its monotonic clock: it is stale.
		c.Net.Isolate(3)
		clocks[3].jump.Store(int64(-10 * time.Minute))
		clocks[1].jump.Store(int64(10 * time.Minute))
		clocks[3].advance.Add(int64(2 * staleAfter))
		require.ErrorIs(t, c.Node(3).Journal().CheckFresh(), journal.ErrStale, "a cut-off follower is stale whatever its wall clock says")
	})
}
