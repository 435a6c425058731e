package clock

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRealClockUnderSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Clock = Real{}
		start := c.Now()

		tc, stopTicker := c.NewTicker(time.Second)
		require.Equal(t, start.Add(time.Second), <-tc)
		require.Equal(t, start.Add(2*time.Second), <-tc)
		stopTicker()

		timer, stopTimer := c.NewTimer(time.Minute)
		require.Equal(t, start.Add(2*time.Second+time.Minute), <-timer)
		require.False(t, stopTimer(), "a fired timer does not stop")

		_, stopTimer = c.NewTimer(time.Minute)
		require.True(t, stopTimer())

		fired := make(chan time.Time, 1)
		c.AfterFunc(time.Hour, func() { fired <- c.Now() })
		require.Equal(t, start.Add(2*time.Second+time.Minute+time.Hour), <-fired)

		stop := c.AfterFunc(time.Hour, func() { t.Error("a stopped AfterFunc ran") })
		require.True(t, stop())
		time.Sleep(2 * time.Hour) // synctest's fake time: lets a wrongly kept call run
	})
}
