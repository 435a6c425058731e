package journal_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/journaltest"
)

// A keyed proposal retried, through the same node or another, is applied
// once and answers the first index; the proposer's node remembers the
// value.
func TestIdempotentRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3})
		ctx := ctxFor(t, time.Minute)
		_, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		key := [16]byte{1, 2, 3}
		i1, v1, err := c.Node(2).Journal().ProposeWithKey(ctx, key, []byte("once"))
		require.NoError(t, err)
		require.Equal(t, []byte("once"), v1)
		// The same key again, through another node: applied once, same
		// index.
		i2, _, err := c.Node(3).Journal().ProposeWithKey(ctx, key, []byte("once"))
		require.NoError(t, err)
		require.Equal(t, i1, i2)
		i3, v3, err := c.Node(2).Journal().ProposeWithKey(ctx, key, []byte("once"))
		require.NoError(t, err)
		require.Equal(t, i1, i3)
		require.Equal(t, []byte("once"), v3, "the proposer's node remembers the value")
		proposeVia(ctx, t, c.Node(1), "barrier")
		for id := uint64(1); id <= 3; id++ {
			require.NoError(t, c.Node(id).Journal().ReadBarrier(ctx))
			n := 0
			for _, v := range appliedData(c.Node(id)) {
				if v == "once" {
					n++
				}
			}
			require.Equal(t, 1, n, "node %d applied the keyed entry once", id)
		}
	})
}
