package frontendtest

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
	"github.com/stretchr/testify/require"
)

// threeWithLeader starts three frontends and waits for their leader; it
// returns the cluster, a context bounding the test, the leader and the
// other two.
func threeWithLeader(t *testing.T) (*Cluster, context.Context, int, []int) {
	t.Helper()
	return threeWithLeaderIn(t, Options{Frontends: 3})
}

// threeWithLeaderIn is threeWithLeader with opts (three frontends).
func threeWithLeaderIn(t *testing.T, opts Options) (*Cluster, context.Context, int, []int) {
	t.Helper()
	c := NewCluster(t, opts)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	leader, err := c.Leader(ctx)
	require.NoError(t, err)
	var others []int
	for i := 1; i <= 3; i++ {
		if i != leader {
			others = append(others, i)
		}
	}
	return c, ctx, leader, others
}

func TestWriteThroughAFollowerIsReadLinearizablyOnAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, _, followers := threeWithLeader(t)
		_, err := c.Frontend(followers[0]).Write(ctx, catalog.Batch{Ops: []catalog.Op{
			{Type: catalog.OpCreate, Path: "/orders", Kind: "table", Cond: catalog.Cond{Absent: true}},
		}})
		require.NoError(t, err)
		other := c.Frontend(followers[1])
		require.NoError(t, other.Journal().ReadBarrier(ctx))
		n, ok := other.Tree().Get("/orders")
		require.True(t, ok)
		require.Equal(t, "table", n.Kind)
	})
}

func TestPartitionedLeaderIsReplacedAndTheHealedClusterConverges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, old, rest := threeWithLeader(t)
		c.Partition(old, rest...)

		// The majority side elects another leader and takes a write.
		var res *catalog.Result
		var err error
		for {
			res, err = c.Frontend(rest[0]).Write(ctx, catalog.Batch{Ops: []catalog.Op{
				{Type: catalog.OpCreate, Path: "/after", Kind: "table", Cond: catalog.Cond{Absent: true}},
			}})
			if err == nil {
				break
			}
			require.NoError(t, ctx.Err(), "the majority never took the write: %v", err)
			<-c.Frontend(rest[0]).Journal().Leadership()
		}
		require.NotEqual(t, uint64(old), c.Frontend(rest[0]).Journal().Status().Leader)

		c.Heal()
		leader, err := c.Leader(ctx)
		require.NoError(t, err)
		require.NotEqual(t, old, leader, "the old leader's term is over")
		require.NoError(t, c.Frontend(old).Journal().WaitApplied(ctx, res.Index))
		n, ok := c.Frontend(old).Tree().Get("/after")
		require.True(t, ok, "the healed old leader has the majority's write")
		require.Equal(t, "table", n.Kind)
	})
}

func TestRestartedFrontendCatchesUpFromItsDataDir(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, others := threeWithLeader(t)
		down := others[0]
		c.StopFrontend(down)
		require.Nil(t, c.Frontend(down))
		res, err := c.Frontend(leader).Write(ctx, catalog.Batch{Ops: []catalog.Op{
			{Type: catalog.OpCreate, Path: "/while-down", Kind: "table", Cond: catalog.Cond{Absent: true}},
		}})
		require.NoError(t, err, "two of three still commit")
		f, err := c.RestartFrontend(ctx, down)
		require.NoError(t, err)
		require.NoError(t, f.Journal().WaitApplied(ctx, res.Index))
		_, ok := f.Tree().Get("/while-down")
		require.True(t, ok, "the restarted frontend has the write it missed")
	})
}

// An observer promoted to a voter restarts as the voter its data dir
// says it is: the cluster configures its role only when it joins.
func TestAPromotedObserverRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCluster(t, Options{Frontends: 1, Observers: 1, InMemory: true})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := c.Leader(ctx)
		require.NoError(t, err)
		require.NoError(t, c.retry(ctx, "promote 2", func() error { return c.Frontend(1).Journal().Promote(ctx, 2) }))
		require.NoError(t, c.await(ctx, "frontend 2 applies its promotion", func() bool {
			return c.Frontend(2).Journal().Status().Role == journal.Follower
		}))
		f, err := c.RestartFrontend(ctx, 2)
		require.NoError(t, err)
		require.Equal(t, journal.Follower, f.Journal().Status().Role, "frontend 2 votes after its restart")
	})
}
