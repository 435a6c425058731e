package journal

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// A member cut off while a node joined and the leader it knew left has
// not applied the join, so its membership names no address for the new
// leader. Once the cut heals, the new leader's stream reaches it, and it
// must answer: it learns the leader's address from the stream, replies,
// and catches up (by the log here; by an image when the leader's log
// starts past it).
func TestLaggingObserverFollowsALeaderWhoseJoinItHasNotApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		c.start(1, 1) // node 1 votes, node 2 observes
		n1, n2 := c.nodes[1], c.nodes[2]
		propose(t, n1, "before")
		await(t, 10*time.Second, "the observer applies the first write", n2.changed, func() bool { return n2.sm.has("before") })

		n3 := c.listen(3)
		c.partition(2)
		require.NoError(t, c.open(n3, func(cfg *Config) { cfg.Join = n1.addr }))
		// The leader counts node 3 reachable once it has heard from it.
		for try := 0; ; try++ {
			err := n3.j.RemoveMember(ctxT(t, 10*time.Second), 1, false)
			if err == nil {
				break
			}
			require.ErrorIs(t, err, ErrUnsafeRemoval)
			require.Less(t, try, 50, "node 1 is never removed")
			time.Sleep(testElectionTimeout)
		}
		await(t, 10*time.Second, "node 3 leads alone", n3.changed, func() bool { return n3.j.Status().Leader == 3 })
		n1.closeJournal()
		propose(t, n3, "after")
		n2.j.mu.Lock()
		_, ok := n2.j.mu.membership.Members[3]
		n2.j.mu.Unlock()
		require.False(t, ok, "the cut-off observer knows node 3 already")

		c.heal()
		await(t, 20*time.Second, "the observer applies the new leader's write", n2.changed, func() bool { return n2.sm.has("after") })
		require.Equal(t, uint64(3), n2.j.Status().Leader)
	})
}
