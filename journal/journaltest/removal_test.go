package journaltest_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/journaltest"
)

// TestRemovedNodeAppliesItsRemoval: on a network whose links delay every
// message (so the append that commits a removal is still queued when the
// leader drops the removed peer from its transport), the removed follower
// still receives it and applies its own removal, as over HTTP.
func TestRemovedNodeAppliesItsRemoval(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Seed: seed})
				ctx := ctxFor(t, 30*time.Second)
				leader, err := c.WaitLeader(ctx)
				require.NoError(t, err)
				idx, _, err := c.Node(leader).Journal().Propose(ctx, []byte("before"))
				require.NoError(t, err)
				// Every follower has applied the write and, once the bubble
				// is idle, its answer has reached the leader: the removal
				// is safe (the other voter is known reachable).
				require.NoError(t, c.WaitApplied(ctx, idx))
				synctest.Wait()
				removed := leader%3 + 1
				c.Net.Delay(0, 0, 5*time.Millisecond, 5*time.Millisecond)

				require.NoError(t, c.Node(leader).Journal().RemoveMember(ctx, removed, false))
				// Past any delay on the links and the drain bound; then
				// every goroutine has done what it will.
				time.Sleep(5 * time.Second)
				synctest.Wait()
				require.True(t, c.Node(removed).Journal().Status().Removed,
					"node %d applies its own removal (applied %d, leader applied %d)", removed,
					c.Node(removed).Journal().Status().Applied, c.Node(leader).Journal().Status().Applied)
			})
		})
	}
}
