package frontendtest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/journal"
)

// awaitTree waits, through a watch (no polling), until cond holds on t.
func awaitTree(ctx context.Context, t *testing.T, tree *catalog.Tree, cond func() bool) {
	t.Helper()
	w := tree.Watch(catalog.WatchOptions{})
	defer w.Close()
	for !cond() {
		_, err := w.Next(ctx)
		require.NoError(t, err, "the condition never held")
	}
}

func TestAFrontendsOwnedNodeGoesWhenItRestartsWithANewEpoch(t *testing.T) {
	c, ctx, leader, others := threeWithLeader(t)
	lf, owner := c.Frontend(leader), others[0]
	epoch := c.Frontend(owner).Epoch()
	id := c.Frontend(owner).ID()
	require.NoError(t, lf.Journal().WaitClusterVersion(ctx, journal.NewestVersion), "owned nodes need version 4")
	awaitTree(ctx, t, lf.Tree(), func() bool {
		_, err := heartbeat.OwnerOf(lf.Tree(), id, epoch, false)
		return err == nil // the owner's epoch is journaled
	})
	o, err := heartbeat.OwnerOf(lf.Tree(), id, epoch, false)
	require.NoError(t, err)
	_, err = lf.Write(ctx, catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/lock", Kind: "lock", Owner: o},
		{Type: catalog.OpCreate, Path: "/other", Kind: "lock"},
	}})
	require.NoError(t, err)
	got, ok := lf.Tree().Owned("/lock")
	require.True(t, ok)
	require.Equal(t, o, got)

	restarted, err := c.RestartFrontend(ctx, owner)
	require.NoError(t, err)
	require.NotEqual(t, epoch, restarted.Epoch())
	for _, i := range []int{leader, others[1]} {
		tree := c.Frontend(i).Tree()
		awaitTree(ctx, t, tree, func() bool { _, ok := tree.Get("/lock"); return !ok })
		_, ok := tree.Get("/other")
		require.True(t, ok, "an unowned node stays")
	}
	_, err = heartbeat.OwnerOf(lf.Tree(), id, epoch, false)
	require.ErrorIs(t, err, heartbeat.ErrEpochEnded)
}
