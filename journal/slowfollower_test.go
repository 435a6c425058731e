package journal_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestSlowFollowerCatchesUp: with every fsync of one follower taking
// slowSync, the leader keeps committing with the other follower, and once
// the writes stop the slow follower applies everything the leader has.
func TestSlowFollowerCatchesUp(t *testing.T) {
	c := newHTTPCluster(t, 3, nil)
	leader := c.waitLeader(t.Context(), 0)
	slow := c.nodes[leader%3]
	slow.fs.delay.Store(int64(slowSync))

	const proposers, each = 8, 25
	lj := c.journal(leader)
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
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := c.journal(slow.id).WaitApplied(ctx, target); err != nil {
		t.Fatalf("slow follower %d reaching the leader's applied index %d: %v (at %d)",
			slow.id, target, err, c.journal(slow.id).Status().Applied)
	}
	if got, want := slow.sm.n.Load(), c.nodes[leader-1].sm.n.Load(); got < want {
		t.Fatalf("slow follower applied %d entries to its state machine, the leader %d", got, want)
	}
}
