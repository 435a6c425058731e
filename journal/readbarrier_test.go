package journal_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/journaltest"
)

// TestReadBarrierCoalesces runs 64 concurrent barriers on the leader, a
// follower and the observer while writes go on: every barrier sees every
// write acknowledged before it began, and the barriers share ReadIndex
// rounds: the node sends fewer requests than it answers barriers. How many
// barriers share a round is a performance figure, reads/round of
// BenchmarkReadBarrier.
func TestReadBarrierCoalesces(t *testing.T) {
	for _, via := range []string{"leader", "follower", "observer"} {
		t.Run("via="+via, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Observers: 1})
				ctx := ctxFor(t, time.Minute)
				leader, err := c.WaitLeader(ctx)
				require.NoError(t, err)
				n := c.Node(map[string]uint64{"leader": leader, "follower": leader%3 + 1, "observer": 4}[via])
				j, lj := n.Journal(), c.Node(leader).Journal()
				// acked is the last write the leader acknowledged; a
				// barrier that starts after must see it applied on n.
				var acked atomic.Int64
				stop := make(chan struct{})
				var writer sync.WaitGroup
				writer.Go(func() {
					for i := int64(1); ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						v := fmt.Sprintf("%s-%d", via, i)
						if _, _, err := lj.Propose(context.Background(), []byte(v)); err != nil {
							t.Errorf("propose %s: %v", v, err)
							return
						}
						acked.Store(i)
						// A pause between writes lets the bubble's time
						// move: a write takes no time here, and a writer
						// that never pauses would hold time still for a
						// round that waits for a tick. The readers pause
						// as long between barriers, so writes land among
						// them.
						time.Sleep(time.Millisecond)
					}
				})
				const readers, each = 64, 20
				sent0 := j.ReadRoundsSentForTest()
				var wg sync.WaitGroup
				for range readers {
					wg.Go(func() {
						for range each {
							seen := acked.Load()
							if err := j.ReadBarrier(ctx); err != nil {
								t.Errorf("barrier: %v", err)
								return
							}
							if v := fmt.Sprintf("%s-%d", via, seen); seen > 0 && !applied(n, v) {
								t.Errorf("a barrier begun after %s was acknowledged returned before node %d applied it", v, n.ID)
								return
							}
							time.Sleep(time.Millisecond) // writes land between barriers
						}
					})
				}
				wg.Wait()
				close(stop)
				writer.Wait()
				sent := j.ReadRoundsSentForTest() - sent0
				require.NotZero(t, acked.Load(), "the writer made progress")
				require.NotZero(t, sent, "the barriers sent ReadIndex requests")
				require.Less(t, sent, uint64(readers*each), "%d ReadIndex requests for %d barriers: none shared", sent, readers*each)
			})
		})
	}
}
