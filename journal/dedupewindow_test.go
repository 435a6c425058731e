package journal_test

import (
	"context"
	"fmt"
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
