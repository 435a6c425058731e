package image

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/catalog/catalogtest"
	"github.com/metatree/metatree/internal/metricstest"
	"github.com/metatree/metatree/journal"
)

// checksOf is how many consistency check rounds node id compared in, and
// whether its corruption alarm is raised.
func checksOf(t *testing.T, c *imageCluster, id uint64) (checks float64, corrupt bool) {
	t.Helper()
	m := metricstest.Scrape(t, c.Node(id).Journal().Collector())
	return m["metatree_journal_consistency_checks_total"], m["metatree_journal_corrupt"] != 0
}

// awaitChecks waits until node id compared in more than after rounds.
func awaitChecks(ctx context.Context, t *testing.T, c *imageCluster, id uint64, after float64) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if n, _ := checksOf(t, c, id); n > after {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node %d compared in no round after %v: %v", id, after, ctx.Err())
		case <-tick.C:
		}
	}
}

// With consistency checks every 20ms, a follower that falls behind the
// compacted log installs an image from a peer, then loses power and
// restarts from that image: no member ever raises the corruption alarm,
// and the follower compares again after each (its catalog, loaded from
// the image, has the digest of the ones that replayed the log).
func TestConsistencyChecksRaiseNoAlarmThroughImageInstallsAndCompaction(t *testing.T) {
	c := newImageCluster(t, func(cfg *journal.Config) { cfg.CheckInterval = 20 * time.Millisecond })
	ctx, _, leader, lagger := c.leaderAndFollower()
	batches := catalogBatches(t, 300)
	var last uint64
	var err error
	for _, b := range batches[:50] {
		last, _, err = leader.Propose(ctx, b)
		require.NoError(t, err)
	}
	require.NoError(t, c.WaitApplied(ctx, last))
	awaitChecks(ctx, t, c, lagger, 0)

	c.Net.Isolate(lagger)
	for _, part := range [][][]byte{batches[50:150], batches[150:]} {
		for _, b := range part {
			last, _, err = leader.Propose(ctx, b)
			require.NoError(t, err)
		}
		for _, n := range c.Nodes() {
			if n.ID == lagger {
				continue
			}
			require.NoError(t, n.Journal().WaitApplied(ctx, last))
			_, err := c.cps[n.ID].Checkpoint(ctx)
			require.NoError(t, err)
		}
	}
	before, _ := checksOf(t, c, lagger)
	c.Net.Heal()
	require.NoError(t, c.Node(lagger).Journal().WaitApplied(ctx, last))
	ids, err := c.store(lagger).Indexes()
	require.NoError(t, err)
	require.NotEmpty(t, ids, "the follower caught up through an image")
	awaitChecks(ctx, t, c, lagger, before)

	c.crash(lagger, true)
	require.NoError(t, c.Restart(ctx, lagger))
	c.startCheckpointer(lagger)
	awaitChecks(ctx, t, c, lagger, 0)
	for _, n := range c.Running() {
		require.NoError(t, n.Journal().Status().Err, "node %d", n.ID)
		_, corrupt := checksOf(t, c, n.ID)
		require.False(t, corrupt, "node %d", n.ID)
	}
}

// doctorImage rewrites the newest image in node id's data dir with one
// attribute of node path changed: the same header, a well-formed body and
// valid checksums, as a bit flipped before the checksum was taken, or a
// restore from the wrong image, would leave it.
func doctorImage(t *testing.T, fs vfs.FS, dir, path string) uint64 {
	t.Helper()
	l, err := ListDir(fs, dir)
	require.NoError(t, err)
	require.NotEmpty(t, l.Images)
	idx := l.Images[0]
	file := l.Path(fs, idx)
	tree := catalog.New()
	info, err := ReadFile(fs, file, func(r io.Reader) error { return tree.Load(r) })
	require.NoError(t, err)
	require.NoError(t, catalogtest.SetAttr(tree, path, "doctored", catalog.String("yes")))
	f, err := fs.Create(file+".doctored", vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	_, _, err = WriteTo(f, info.Header, tree.Save)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, fs.Rename(file+".doctored", file))
	return idx
}

// A member restarted from an image with one changed attribute and valid
// checksums is found at the first mark after the image, against the
// digests the others reported there: that member, and only it, raises
// the corruption alarm, and writes go on through the healthy majority.
func TestConsistencyCheckFindsAMemberRestartedFromADoctoredImage(t *testing.T) {
	c := newImageCluster(t, func(cfg *journal.Config) { cfg.CheckInterval = 20 * time.Millisecond })
	ctx, _, leader, bad := c.leaderAndFollower()
	var last uint64
	var err error
	for _, b := range catalogBatches(t, 60) {
		last, _, err = leader.Propose(ctx, b)
		require.NoError(t, err)
	}
	require.NoError(t, c.WaitApplied(ctx, last))
	_, err = c.cps[bad].Checkpoint(ctx)
	require.NoError(t, err)
	awaitChecks(ctx, t, c, bad, 0)

	fs := c.lastFS[bad]
	dataDir := fs.PathDir(c.store(bad).Dir())
	c.crash(bad, false)
	doctorImage(t, fs, dataDir, "/db0")
	require.NoError(t, c.Restart(ctx, bad))
	c.startCheckpointer(bad)

	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var ce *journal.CorruptError
	for !errors.As(c.Node(bad).Journal().Status().Err, &ce) {
		select {
		case <-ctx.Done():
			t.Fatalf("node %d raised no corruption alarm: %v", bad, ctx.Err())
		case <-tick.C:
		}
	}
	// The majority holds a healthy member; it may also hold bad itself,
	// through a report bad's previous run journaled from its healthy state
	// before the crash, for a mark it replays now from the doctored image.
	others := slices.DeleteFunc(slices.Clone(ce.Agreeing), func(id uint64) bool { return id == bad })
	require.NotEmpty(t, others, "the digest bad differs from is reported by a healthy member")
	_, corrupt := checksOf(t, c, bad)
	require.True(t, corrupt)
	require.ErrorIs(t, c.Node(bad).Journal().CheckFresh(), journal.ErrCorrupt)

	next, _, err := leader.Propose(ctx, catalogBatches(t, 61)[60])
	require.NoError(t, err)
	for _, n := range c.Running() {
		if n.ID == bad {
			continue
		}
		require.NoError(t, n.Journal().WaitApplied(ctx, next))
		require.NoError(t, n.Journal().Status().Err, "node %d", n.ID)
		_, corrupt := checksOf(t, c, n.ID)
		require.False(t, corrupt, "node %d", n.ID)
	}
}
