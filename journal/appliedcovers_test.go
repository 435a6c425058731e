package journal_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/journaltest"
)

// Once Propose returns, the node's applied index covers the entry: a
// checkpoint or WaitApplied right after a write sees it. Concurrent
// proposers make the applier's batches long, so a proposer woken early in
// a batch checks before the batch ends.
func TestAppliedCoversReturnedProposals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		follower := leader%3 + 1
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for g := range 32 {
			n := c.Node(leader)
			if g%4 == 3 {
				n = c.Node(follower)
			}
			j := n.Journal()
			wg.Go(func() {
				for i := range 30 {
					idx, _, err := j.Propose(ctx, fmt.Appendf(nil, "g%d-%d", g, i))
					if err != nil {
						errs <- err
						return
					}
					if applied := j.Status().Applied; applied < idx {
						errs <- fmt.Errorf("node %d returned index %d with applied %d", n.ID, idx, applied)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}
