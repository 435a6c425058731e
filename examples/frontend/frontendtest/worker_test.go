package frontendtest

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/journal"
)

// withWorkers starts three frontends and workers 4 and 5, and waits for
// the leader; it returns the cluster, a context bounding the test, the
// leader and the other two frontends.
func withWorkers(t *testing.T) (*Cluster, context.Context, int, []int) {
	t.Helper()
	c, ctx, leader, others := threeWithLeader(t)
	for _, id := range []uint64{4, 5} {
		_, err := c.AddWorker(ctx, id)
		require.NoError(t, err)
	}
	return c, ctx, leader, others
}

// requireCancelled waits for ctx (a query's or a fragment's) to end and
// checks its cause: sentinel, naming node.
func requireCancelled(t *testing.T, test context.Context, ctx context.Context, sentinel error, node uint64) *cancel.CanceledError {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-test.Done():
		t.Fatalf("not cancelled (want %v of node %d): %v", sentinel, node, test.Err())
	}
	ce, ok := context.Cause(ctx).(*cancel.CanceledError)
	require.True(t, ok, "cause %v is a *cancel.CanceledError", context.Cause(ctx))
	require.ErrorIs(t, ce, sentinel)
	require.Equal(t, node, ce.Node)
	return ce
}

func TestBadWorkerIDsAndStoppedParticipantsAreRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, _, _ := withWorkers(t)
		for _, id := range []uint64{0, 2, 4} {
			_, err := c.AddWorker(ctx, id)
			require.ErrorIs(t, err, ErrInvalidWorker, "id %d", id)
		}
		_, err := c.RestartWorker(ctx, 9)
		require.ErrorIs(t, err, ErrInvalidWorker, "a worker never added")
		_, err = c.StartQuery(ctx, 1, 9)
		require.ErrorIs(t, err, ErrNotRunning, "a query on a worker never added")
		c.StopWorker(5)
		_, err = c.StartQuery(ctx, 1, 5)
		require.ErrorIs(t, err, ErrNotRunning, "a query on a stopped worker")
		c.StopFrontend(3)
		_, err = c.StartQuery(ctx, 3, 4)
		require.ErrorIs(t, err, ErrNotRunning, "a query coordinated by a stopped frontend")
	})
}

func TestWorkerRestartCancelsItsQueriesOnEveryFrontend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, _, _ := withWorkers(t)
		old := c.Worker(4).Epoch()
		var onFour []*Query
		for i := 1; i <= 3; i++ {
			q, err := c.StartQuery(ctx, i, 4)
			require.NoError(t, err, "a query coordinated by frontend %d", i)
			onFour = append(onFour, q)
		}
		onFive, err := c.StartQuery(ctx, 1, 5)
		require.NoError(t, err)
		defer onFive.Finish()

		w, err := c.RestartWorker(ctx, 4)
		require.NoError(t, err)
		require.NotEqual(t, old, w.Epoch(), "a restarted worker has a new epoch")
		for _, q := range onFour {
			ce := requireCancelled(t, ctx, q.Context(), cancel.ErrNodeRestarted, 4)
			require.Equal(t, old, ce.OldEpoch)
			require.Equal(t, w.Epoch(), ce.NewEpoch)
			require.ErrorIs(t, context.Cause(q.Fragment(4)), cancel.ErrClosed, "the old worker process took its fragment with it")
			q.Finish()
		}
		require.NoError(t, onFive.Context().Err(), "a query on another worker runs on")

		q, err := c.StartQuery(ctx, 2, 4)
		require.NoError(t, err, "the restarted worker takes new queries")
		require.NoError(t, q.Context().Err())
		q.Finish()
	})
}

func TestStoppedWorkerIsDeclaredDeadAndItsQueriesCancelledOnEveryFrontend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, _, _ := withWorkers(t)
		var onFour []*Query
		for i := 1; i <= 3; i++ {
			q, err := c.StartQuery(ctx, i, 4, 5)
			require.NoError(t, err)
			onFour = append(onFour, q)
		}
		onFive, err := c.StartQuery(ctx, 2, 5)
		require.NoError(t, err)
		defer onFive.Finish()

		c.StopWorker(4)
		require.Nil(t, c.Worker(4))
		for _, q := range onFour {
			requireCancelled(t, ctx, q.Context(), cancel.ErrNodeDead, 4)
			require.NoError(t, q.Fragment(5).Err(), "the fragment on the live worker is the coordinator's to withdraw")
			q.Finish()
		}
		require.NoError(t, onFive.Context().Err())
		m, ok := c.Frontend(1).Members().Member(4)
		require.True(t, ok)
		require.Equal(t, heartbeat.StatusDead, m.Status)
	})
}

func TestFrontendRestartCancelsTheFragmentsItCoordinates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := withWorkers(t)
		f := followers[0]
		old := c.Frontend(f).Epoch()
		q, err := c.StartQuery(ctx, f, 4, 5)
		require.NoError(t, err)
		defer q.Finish()
		keep, err := c.StartQuery(ctx, leader, 4, 5)
		require.NoError(t, err)
		defer keep.Finish()

		restarted, err := c.RestartFrontend(ctx, f)
		require.NoError(t, err)
		for _, id := range []uint64{4, 5} {
			ce := requireCancelled(t, ctx, q.Fragment(id), cancel.ErrNodeRestarted, uint64(f))
			require.Equal(t, old, ce.OldEpoch)
			require.Equal(t, restarted.Epoch(), ce.NewEpoch)
		}
		require.ErrorIs(t, context.Cause(q.Context()), cancel.ErrClosed, "the old frontend process took its query with it")
		require.NoError(t, keep.Context().Err(), "another coordinator's query runs on")
		require.NoError(t, keep.Fragment(4).Err())

		require.NoError(t, c.AwaitWorker(ctx, 4))
		again, err := c.StartQuery(ctx, f, 4)
		require.NoError(t, err, "the restarted frontend coordinates new queries")
		require.NoError(t, again.Fragment(4).Err())
		again.Finish()
	})
}

func TestWorkerPartitionedFromTheLeaderIsDeadUntilHealed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := withWorkers(t)
		q, err := c.StartQuery(ctx, followers[0], 4)
		require.NoError(t, err)
		defer q.Finish()
		epoch := c.Worker(4).Epoch()

		c.Network().Partition(WorkerAddr(4), Addr(leader))
		requireCancelled(t, ctx, q.Context(), cancel.ErrNodeDead, 4)
		require.NoError(t, q.Fragment(4).Err(), "the worker cut off from the leader cancels nothing on silence")

		c.Heal()
		require.NoError(t, c.AwaitWorker(ctx, 4), "the healed worker is alive again")
		require.NotEqual(t, epoch, c.Worker(4).Epoch(), "with a fresh epoch: the one declared dead ended")
		again, err := c.StartQuery(ctx, followers[0], 4)
		require.NoError(t, err, "the healed worker takes new queries")
		again.Finish()
	})
}

func TestFrontendPartitionedFromTheClusterHasItsFragmentsCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := withWorkers(t)
		f := followers[0]
		q, err := c.StartQuery(ctx, f, 4)
		require.NoError(t, err)
		defer q.Finish()

		c.Partition(f, leader, followers[1])
		requireCancelled(t, ctx, q.Fragment(4), cancel.ErrNodeDead, uint64(f))
		c.Heal()
	})
}

// A removed frontend receives no entry, so it would never hear of a
// worker's restart or death: it coordinates no new query, as the
// frontend's POST /v1/queries refuses one.
func TestARemovedFrontendCoordinatesNoQuery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, followers := withWorkers(t)
		gone := followers[0]
		require.NoError(t, c.Frontend(leader).RemoveMember(ctx, uint64(gone), false))
		require.NoError(t, c.await(ctx, "the frontend applying its removal", func() bool {
			return c.Frontend(gone).Journal().Status().Removed
		}))
		_, err := c.StartQuery(ctx, gone, 4, 5)
		require.ErrorIs(t, err, journal.ErrRemoved)

		q, err := c.StartQuery(ctx, followers[1], 4, 5)
		require.NoError(t, err, "a member still coordinates")
		q.Finish()
	})
}
