package journal_test

import (
	"context"
	"testing"
	"time"
)

// BenchmarkHandoff: with default timings (100 ms tick, 10 election ticks),
// the time from the leader's Handoff call to the first write committed by
// the new leader, beside BenchmarkFailover (the same without a hand-off:
// the leader closes and the others wait out an election timeout).
func BenchmarkHandoff(b *testing.B) {
	c := newHTTPCluster(b, 3, nil)
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		ctx := b.Context()
		leader := waitLeader(ctx, b, c)
		idx, _, err := c.Node(leader).Journal().Propose(ctx, []byte("before"))
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range c.Nodes() { // everyone caught up: a fair start
			if err := n.Journal().WaitApplied(ctx, idx); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		t0 := time.Now()
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = c.Node(leader).Journal().Handoff(hctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		next := c.Node(leader).Journal().Status().Leader
		if next == 0 || next == leader {
			b.Fatalf("after Handoff node %d sees leader %d", leader, next)
		}
		if _, _, err := c.Node(next).Journal().Propose(ctx, []byte("after")); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
	}
	b.ReportMetric(ms(total/time.Duration(b.N)), "handoff-ms")
}
