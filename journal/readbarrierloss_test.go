package journal_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// TestReadBarrierLeaderLossAndContext cuts a follower off: its barriers end
// with their contexts (wrapping the context's error), the round they
// started stays in flight for the callers still waiting, and once the
// partition heals those callers get a barrier that covers a write the
// majority acknowledged during the partition. After Close, a barrier
// fails at once with ErrClosed.
func TestReadBarrierLeaderLossAndContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		f := leader%3 + 1
		n := c.Node(f)
		j := n.Journal()
		require.NoError(t, j.ReadBarrier(ctx))
		c.Net.Isolate(f)

		// Callers that wait past the heal, started while cut off.
		const waiting = 8
		errs := make(chan error, waiting)
		for range waiting {
			go func() { errs <- j.ReadBarrier(ctx) }()
		}
		// Callers that give up: the context's error, not a hang.
		for range 4 {
			gctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err := j.ReadBarrier(gctx)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
		}
		now, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		require.NotEqual(t, f, now, "the cut-off follower leads no majority")
		proposeVia(ctx, t, c.Node(now), "during")
		synctest.Wait()
		select {
		case err := <-errs:
			t.Fatalf("a barrier on the cut-off node returned (%v) before the partition healed", err)
		default:
		}
		c.Net.Heal()
		for range waiting {
			require.NoError(t, <-errs)
		}
		require.True(t, applied(n, "during"), "the healed follower's barrier covers the write made during the partition")

		require.NoError(t, c.Stop(f))
		require.ErrorIs(t, j.ReadBarrier(ctx), journal.ErrClosed, "after Close")
	})
}
