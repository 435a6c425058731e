package image

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
