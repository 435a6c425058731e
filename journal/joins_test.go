package journal_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// Several nodes joining through the same helper at once: raft takes one
// membership change at a time, the others wait their turn.
func TestConcurrentJoins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1})
		ctx := ctxFor(t, time.Minute)
		type joined struct {
			j   *journal.Journal
			err error
		}
		results := make(chan joined, 3)
		for id := uint64(2); id <= 4; id++ {
			go func() {
				addr := fmt.Sprintf("node%d", id)
				j, err := journal.Open(ctx, journal.Config{
					ID: id, Dir: "/" + addr, Addr: addr, FS: vfs.NewMem(),
					Transport: c.Net.Transport(addr), StateMachine: &journaltest.Recorder{},
					Join: "node1",
				})
				results <- joined{j, err}
			}()
		}
		var joiners []*journal.Journal
		var errs []error
		for range 3 {
			r := <-results
			if r.err != nil {
				errs = append(errs, r.err)
				continue
			}
			joiners = append(joiners, r.j)
		}
		defer func() {
			for _, j := range joiners {
				require.NoError(t, j.Close())
			}
		}()
		require.Empty(t, errs, "every join succeeds")
		require.Len(t, c.Node(1).Journal().Status().Members, 4)
		for _, j := range joiners {
			_, _, err := j.Propose(ctx, fmt.Appendf(nil, "from-%d", j.Status().ID))
			require.NoError(t, err)
		}
	})
}
