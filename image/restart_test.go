package image

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
)

// A follower whose newest image is corrupt restarts from the older one and
// replays the log from there: raft restarts from the index the catalog
// holds, not from its snapshot (the corrupt image), so the entries between
// the two images are applied and the catalog matches the leader's.
func TestRestartFromOlderImageReplaysTheGap(t *testing.T) {
	c := newImageCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leaderID, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	leader := c.Node(leaderID).Journal()
	var f uint64 = 1
	if f == leaderID {
		f = 2
	}
	batches := catalogBatches(t, 70)
	var last uint64
	for _, b := range batches[:60] {
		last, _, err = leader.Propose(ctx, b)
		require.NoError(t, err)
	}
	require.NoError(t, c.Node(f).Journal().WaitApplied(ctx, last))
	older, err := c.cps[f].Checkpoint(ctx)
	require.NoError(t, err)
	for _, b := range batches[60:] { // fewer than the compaction margin
		last, _, err = leader.Propose(ctx, b)
		require.NoError(t, err)
	}
	require.NoError(t, c.Node(f).Journal().WaitApplied(ctx, last))
	newer, err := c.cps[f].Checkpoint(ctx)
	require.NoError(t, err)
	require.Greater(t, newer.Index, older.Index)
	require.Equal(t, newer.Index, c.Node(f).Journal().Status().Image, "raft's snapshot is the newer image")

	c.crash(f, false)
	fs := c.lastFS[f]
	corruptFile(t, fs, fs.PathJoin(c.store(f).Dir(), newer.Name))
	require.NoError(t, c.Restart(ctx, f))
	c.startCheckpointer(f)
	fj := c.Node(f).Journal()
	require.Equal(t, older.Index, fj.Status().Image, "started from the older image")
	require.NoError(t, fj.WaitApplied(ctx, last))
	require.NoError(t, leader.WaitApplied(ctx, last))
	require.Equal(t, c.tree(leaderID).Len(), c.tree(f).Len())
	require.Equal(t, saveBytes(t, c.tree(leaderID)), saveBytes(t, c.tree(f)))
}

// A node whose only image is corrupt, and whose log was never compacted
// (the image is within the compaction margin), replays the whole log: it
// restarts with every node, never with the root alone.
func TestRestartWithOnlyImageCorruptReplaysTheLog(t *testing.T) {
	c := newImageCluster(t, func(cfg *journal.Config) { cfg.CompactMargin = 10_000 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leaderID, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	leader := c.Node(leaderID).Journal()
	var f uint64 = 1
	if f == leaderID {
		f = 2
	}
	var last uint64
	for _, b := range catalogBatches(t, 60) {
		last, _, err = leader.Propose(ctx, b)
		require.NoError(t, err)
	}
	require.NoError(t, c.Node(f).Journal().WaitApplied(ctx, last))
	only, err := c.cps[f].Checkpoint(ctx)
	require.NoError(t, err)
	want := c.tree(f).Len()
	require.Greater(t, want, 1)

	c.crash(f, false)
	fs := c.lastFS[f]
	corruptFile(t, fs, fs.PathJoin(c.store(f).Dir(), only.Name))
	require.NoError(t, c.Restart(ctx, f))
	c.startCheckpointer(f)
	fj := c.Node(f).Journal()
	require.Zero(t, fj.Status().Image, "no usable image")
	require.NoError(t, fj.WaitApplied(ctx, last))
	require.Equal(t, want, c.tree(f).Len())
	require.NoError(t, leader.WaitApplied(ctx, last))
	require.Equal(t, saveBytes(t, c.tree(leaderID)), saveBytes(t, c.tree(f)))
}
