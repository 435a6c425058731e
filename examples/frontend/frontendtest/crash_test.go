package frontendtest

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
)

func TestCrashedFrontendRestartsFromItsInMemoryDiskWithTheAcknowledgedWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, _ := threeWithLeaderIn(t, Options{Frontends: 3, InMemory: true})
		down := leader%3 + 1
		names, err := c.FS(down).List(memDir(down))
		require.NoError(t, err)
		require.Contains(t, names, "journal", "the frontend keeps its data dir on its in-memory filesystem")

		res, err := c.Frontend(leader).Write(ctx, catalog.Batch{Ops: []catalog.Op{
			{Type: catalog.OpCreate, Path: "/before", Kind: "table", Cond: catalog.Cond{Absent: true}},
		}})
		require.NoError(t, err)
		require.NoError(t, c.Frontend(down).Journal().WaitApplied(ctx, res.Index))
		old := c.FS(down)
		require.NoError(t, c.Crash(down))
		require.Nil(t, c.Frontend(down))
		require.NotSame(t, old, c.FS(down), "the restart gets what the power cut kept")

		f, err := c.RestartFrontend(ctx, down)
		require.NoError(t, err)
		require.NoError(t, f.Journal().ReadBarrier(ctx))
		_, ok := f.Tree().Get("/before")
		require.True(t, ok, "an acknowledged write survives the power cut of a member that applied it")
	})
}

func TestCrashNeedsTheInMemoryFilesystem(t *testing.T) {
	c := &Cluster{net: NewNetwork(), fss: nil}
	require.ErrorIs(t, c.Crash(1), ErrNotInMemory)
}

func TestShutdownFrontendHandsLeadershipToAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, _ := threeWithLeaderIn(t, Options{Frontends: 3, InMemory: true})
		require.NoError(t, c.ShutdownFrontend(ctx, leader))
		require.Nil(t, c.Frontend(leader))
		next, err := c.Leader(ctx)
		require.NoError(t, err)
		require.NotEqual(t, leader, next)
		_, err = c.RestartFrontend(ctx, leader)
		require.NoError(t, err)
	})
}

// A cluster of one voter and an observer: the observer joins as one, and
// a power cut of the voter on a slow disk restarts it on a disk as slow,
// where it elects itself again and the observer reads what it wrote.
func TestSoleVoterOnASlowDiskRestartsAsSlowAndTheObserverFollows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		c := NewCluster(t, Options{Frontends: 1, Observers: 1, InMemory: true})
		leader, err := c.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, leader)
		st := c.Frontend(1).Journal().Status()
		require.Len(t, st.Members, 2)
		for _, m := range st.Members {
			want := journal.Follower
			if m.ID == 2 {
				want = journal.Observer
			}
			require.Equal(t, want, m.Role, "member %d", m.ID)
		}

		const slow = 2 * time.Second
		c.FS(1).SetSyncDelay(slow, ".log")
		require.NoError(t, c.Crash(1))
		d, suffix := c.FS(1).SyncDelay()
		require.Equal(t, slow, d, "the disk is as slow after the power cut")
		require.Equal(t, ".log", suffix)
		_, err = c.RestartFrontend(ctx, 1)
		require.NoError(t, err)
		_, err = c.Leader(ctx)
		require.NoError(t, err)
		start := time.Now()
		res, err := c.Frontend(1).Write(ctx, catalog.Batch{Ops: []catalog.Op{
			{Type: catalog.OpCreate, Path: "/slow", Kind: "table"},
		}})
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), slow, "the write waited for a slow fsync")
		o := c.Frontend(2)
		require.NoError(t, o.Journal().ReadBarrier(ctx))
		require.GreaterOrEqual(t, o.Tree().Index(), res.Index)
	})
}
