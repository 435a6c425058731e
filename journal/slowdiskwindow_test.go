package journal_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// A sole voter whose WAL fsyncs take three election timeouts, with more
// writers than its dedupe window holds entries, keeps accepting writes:
// every write succeeds. The proposals made while one fsync runs wait in
// raft's unsynced tail, which grows past the window; a copy appended
// behind it lands more than a window after the commit index its proposer
// knew (its since) and could only expire, and proposing it again at once
// appends another copy behind the next tail, for ever. The leader refuses
// such a copy before it reaches the log, and the proposer, no copy of its
// proposal being in the log, proposes again with a newer since once the
// tail is durable.
func TestSoleVoterOnSlowDiskAcceptsMoreWritersThanItsWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			window  = 8
			writers = 3 * window
			rounds  = 4
		)
		var fs *journaltest.CrashFS
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, Configure: func(cfg *journal.Config) {
			cfg.DedupeWindow, cfg.CompactMargin = window, window
			if fs == nil {
				fs = journaltest.WrapCrashFS(cfg.FS.(*vfs.MemFS))
			}
			cfg.FS = fs
		}})
		ctx := ctxFor(t, 5*time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		j := c.Node(leader).Journal()

		fs.SetSyncDelay(3*bubbleElectionTicks*bubbleTick, ".log")
		var wg sync.WaitGroup
		errs := make(chan error, writers*rounds)
		for w := range writers {
			wg.Go(func() {
				for r := range rounds {
					if _, _, err := j.Propose(ctx, fmt.Appendf(nil, "w%d-%d", w, r)); err != nil {
						errs <- fmt.Errorf("writer %d, round %d: %w", w, r, err)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		var failed []error
		for err := range errs {
			failed = append(failed, err)
		}
		require.Empty(t, failed, "%d of %d writes failed on a slow disk", len(failed), writers*rounds)
		fs.SetSyncDelay(0, "")
	})
}
