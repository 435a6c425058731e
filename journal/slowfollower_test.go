package journal_test

import (
	"context"
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

// TestSlowFollowerCatchesUp: with every fsync of one follower taking
// slowSync, the leader keeps committing with the other follower, and once
// the writes stop the slow follower applies everything the leader has.
func TestSlowFollowerCatchesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		disks := map[uint64]*journaltest.CrashFS{}
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Configure: func(cfg *journal.Config) {
			fs := journaltest.WrapCrashFS(cfg.FS.(*vfs.MemFS))
			mu.Lock()
			disks[cfg.ID] = fs
			mu.Unlock()
			cfg.FS = fs
		}})
		leader, err := c.WaitLeader(ctxFor(t, time.Minute))
		require.NoError(t, err)
		slow := leader%3 + 1
		mu.Lock()
		disks[slow].SetSyncDelay(slowSync, "")
		mu.Unlock()

		const proposers, each = 8, 25
		lj := c.Node(leader).Journal()
		var wg sync.WaitGroup
		errs := make(chan error, proposers*each)
		for p := range proposers {
			wg.Go(func() {
				for i := range each {
					ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
					_, _, err := lj.Propose(ctx, fmt.Appendf(nil, "p%d-%d", p, i))
					cancel()
					if err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("propose with a slow follower: %v", err)
		}

		target := lj.Status().Applied
		sj := c.Node(slow).Journal()
		if err := sj.WaitApplied(ctxFor(t, time.Minute), target); err != nil {
			t.Fatalf("slow follower %d reaching the leader's applied index %d: %v (at %d)",
				slow, target, err, sj.Status().Applied)
		}
		got := len(c.Node(slow).StateMachine().(*journaltest.Recorder).Applied())
		want := len(c.Node(leader).StateMachine().(*journaltest.Recorder).Applied())
		require.GreaterOrEqual(t, got, want, "the slow follower applied as many entries to its state machine as the leader")
		require.GreaterOrEqual(t, want, proposers*each, "the leader applied every write")
	})
}
