package journal_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// The windows of the cluster in TestEveryReplicaDedupesWithTheClusterWindow:
// node 1 bootstraps with the wide one, the others are configured with the
// narrow one.
const (
	bootWindow   = 20
	narrowWindow = 5
)

// Members configured with different dedupe windows decide every copy of a
// keyed write alike, by the window the cluster was bootstrapped with: a
// retry landing further from its first copy than the narrow window but
// within the cluster's is skipped as a duplicate on every replica, and
// every replica holds the same entries, also after a restart replays the
// log.
func TestEveryReplicaDedupesWithTheClusterWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Configure: func(cfg *journal.Config) {
			w := uint64(narrowWindow)
			if cfg.ID == 1 {
				w = bootWindow
			}
			cfg.DedupeWindow, cfg.CompactMargin = w, w
		}})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		ln := c.Node(leader).Journal()

		key := [16]byte{0xd, 0xe, 0xd}
		first, _, err := ln.ProposeWithKey(ctx, key, []byte("keyed"))
		require.NoError(t, err)
		for i := range narrowWindow + 3 {
			_, _, err := ln.Propose(ctx, fmt.Appendf(nil, "filler-%d", i))
			require.NoError(t, err)
		}
		again, _, err := ln.ProposeWithKey(ctx, key, []byte("keyed"))
		require.NoError(t, err)
		require.Equal(t, first, again, "the retry is a duplicate of the first copy")
		requireSameEntriesKeyedOnce(ctx, t, c, ln)

		// A restart replays the log into a fresh state machine with the
		// cluster's window too.
		for _, id := range []uint64{2, 3} {
			require.NoError(t, c.Stop(id))
			require.NoError(t, c.Restart(ctx, id))
		}
		requireSameEntriesKeyedOnce(ctx, t, c, ln)
	})
}

// requireSameEntriesKeyedOnce writes a barrier through leader and checks
// that every node, caught up to it, applied "keyed" once and the same
// entries as every other node.
func requireSameEntriesKeyedOnce(ctx context.Context, t *testing.T, c *journaltest.Cluster, leader *journal.Journal) {
	t.Helper()
	barrier, _, err := leader.Propose(ctx, []byte("barrier"))
	require.NoError(t, err)
	require.NoError(t, c.WaitApplied(ctx, barrier))
	var want []journaltest.Applied
	for _, n := range c.Running() {
		got := n.StateMachine().(*journaltest.Recorder).Applied()
		keyed := 0
		for _, a := range got {
			if string(a.Data) == "keyed" {
				keyed++
			}
		}
		require.Equal(t, 1, keyed, "node %d applied the keyed write once", n.ID)
		if want == nil {
			want = got
			continue
		}
		require.Equal(t, want, got, "node %d applied what node %d did", n.ID, c.Running()[0].ID)
	}
}

// countOf returns how many of values are v.
func countOf(values []string, v string) int {
	n := 0
	for _, x := range values {
		if x == v {
			n++
		}
	}
	return n
}

// A member configured with a narrower dedupe window (and compaction
// margin) than the cluster's joins by an image: it decides a retry by the
// cluster's window, which the image's membership carries, its shadow
// checkpoint replays the retry alike, and it keeps the cluster's window of
// log behind its newest image whatever its own CompactMargin.
func TestAMemberJoiningByImageUsesTheClusterWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const clusterWindow, narrow = 20, 5
		c, imgs := newImageBubble(t, journaltest.Options{Voters: 1}, clusterWindow)
		n1 := c.Node(1)
		j1 := n1.Journal()

		for i := range clusterWindow + 5 {
			propose(t, n1, fmt.Sprintf("a%d", i))
		}
		checkpoint(t, n1, imgs.of(1))
		for i := range clusterWindow + 5 {
			propose(t, n1, fmt.Sprintf("b%d", i))
		}
		key := [16]byte{0xc1}
		keyedAt, _, err := j1.ProposeWithKey(ctxFor(t, 5*time.Second), key, []byte("keyed"))
		require.NoError(t, err)
		checkpoint(t, n1, imgs.of(1))
		first, err := j1.LogFirstIndexForTest()
		require.NoError(t, err)
		require.Greater(t, first, uint64(1), "node 1 compacted its log")

		// Node 2 joins through node 1.
		n2, err := c.add(t, journal.Observer, func(cfg *journal.Config) {
			cfg.CompactMargin, cfg.DedupeWindow = narrow, narrow
		})
		require.NoError(t, err)
		j2 := n2.Journal()
		select {
		case <-imgs.of(1).requests:
		case <-ctxFor(t, 10*time.Second).Done():
			t.Fatal("no image requested for node 2")
		}
		installed := checkpoint(t, n1, imgs.of(1))
		propose(t, n1, "after-image")
		require.NoError(t, j2.ReadBarrier(ctxFor(t, 10*time.Second)))
		require.Equal(t, 1, imgs.of(2).installCount(), "node 2 joined by the image")

		// A retry further from the first copy than node 2's own window and
		// within the cluster's: a duplicate on the leader, and on node 2.
		for j1.Status().Applied <= keyedAt+narrow {
			propose(t, n1, "filler")
		}
		again, _, err := j1.ProposeWithKey(ctxFor(t, 5*time.Second), key, []byte("keyed"))
		require.NoError(t, err)
		require.Equal(t, keyedAt, again, "the retry is a duplicate in the cluster's window")
		propose(t, n1, "barrier")
		require.NoError(t, j2.ReadBarrier(ctxFor(t, 10*time.Second)))
		require.Equal(t, smOf(n1).values(), smOf(n2).values())
		require.Equal(t, 1, countOf(smOf(n2).values(), "keyed"), "node 2 applied the keyed write once")

		// Node 2's shadow checkpoint replays the retry from the installed image
		// with the same window.
		older := checkpoint(t, n2, imgs.of(2))
		im, ok := imgs.of(2).image(older)
		require.True(t, ok)
		shadow := slices.Collect(maps.Values(im.ents))
		require.Equal(t, 1, countOf(shadow, "keyed"), "node 2's shadow replay holds the keyed write once")

		// More than node 2's own margin and less than the cluster's window
		// later, a newer image does not compact the log up to the older one.
		// The fillers are counted rather than proposed until node 2 has
		// applied enough: node 2 lags node 1, and a loop on its applied index
		// overshoots the cluster's window.
		for range narrow + 1 {
			propose(t, n1, "filler")
		}
		require.NoError(t, j2.ReadBarrier(ctxFor(t, 10*time.Second)))
		newest := checkpoint(t, n2, imgs.of(2))
		require.Greater(t, newest-older, uint64(narrow))
		require.Less(t, newest-older, uint64(clusterWindow))
		first, err = j2.LogFirstIndexForTest()
		require.NoError(t, err)
		require.Equal(t, installed+1, first, "node 2 keeps the cluster's window of log behind its newest image %d", newest)
	})
}
