package frontendtest

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
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
