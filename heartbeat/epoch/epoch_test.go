package epoch_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/internal/wire"
)

// Epochs drawn one after another are ordered by their start, even within
// one millisecond and with the clock standing still (a synctest bubble);
// temporary, zero and version-4 epochs are not ordered.
func TestEpochsOrderedByStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := epoch.New(), epoch.New()
		time.Sleep(time.Hour)
		c := epoch.New()
		require.True(t, a.Ordered())
		require.True(t, a.StartedBefore(b), "drawn in the same instant")
		require.True(t, b.StartedBefore(c))
		require.True(t, a.StartedBefore(c))
		require.False(t, c.StartedBefore(a))
		require.False(t, a.StartedBefore(a))

		tmp := wire.TemporaryEpoch(a, 2)
		v4, err := epoch.Parse("5f0c6b1e-9a53-4b8e-8d5e-3c1f2a4b6d7e")
		require.NoError(t, err)
		for _, e := range []epoch.Epoch{tmp, v4, {}} {
			require.False(t, e.Ordered(), "%v", e)
			require.False(t, e.StartedBefore(c), "%v", e)
			require.False(t, a.StartedBefore(e), "%v", e)
		}
	})
}
