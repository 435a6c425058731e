package clock

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// On the real clock a step moves the wall reading of Now and not its
// monotonic one: a reading taken between two of time.Now's sits between
// them by Sub, an hour ahead of them by UnixNano.
func TestSteppedMovesTheWallReadingOnly(t *testing.T) {
	var c Stepped
	c.Step(time.Hour)
	before := time.Now()
	s := c.Now()
	after := time.Now()
	require.GreaterOrEqual(t, s.Sub(before), time.Duration(0), "the monotonic reading did not move")
	require.GreaterOrEqual(t, after.Sub(s), time.Duration(0), "the monotonic reading did not move")
	require.GreaterOrEqual(t, s.UnixNano()-before.UnixNano(), int64(time.Hour), "the wall reading moved")
	require.LessOrEqual(t, s.UnixNano()-after.UnixNano(), int64(time.Hour))

	c.Step(-3 * time.Hour)
	require.Equal(t, -2*time.Hour, c.Offset())
	back := c.Now()
	require.GreaterOrEqual(t, back.Sub(s), time.Duration(0), "a step back is no time going backwards")
	require.Less(t, back.UnixNano(), time.Now().UnixNano()-int64(time.Hour), "the wall reading went back")
}

// In a bubble time.Now has no monotonic reading: a step moves every
// reading, and the timers still run on the bubble's clock.
func TestSteppedInABubbleMovesEveryReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Stepped
		before := c.Now()
		c.Step(time.Hour)
		require.Equal(t, time.Hour, c.Now().Sub(before))
		tick, stop := c.NewTicker(time.Minute)
		defer stop()
		start := time.Now()
		<-tick
		require.Equal(t, time.Minute, time.Since(start))
	})
}
