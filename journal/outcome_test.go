package journal_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// A follower's forwarded proposal applies on the leader, but the follower
// hears nothing from the leader until the log is compacted past it; it
// catches up from an image, which holds the proposal's effect but not its
// answer. Its later copies of the proposal expire (they land past the
// dedupe window), and proposing again under a newer since would apply
// the write a second time: the proposal ends with ErrOutcomeUnknown
// instead, and every node holds the write once.
func TestExpiredCopyAfterAnImageIsUnknownNotReapplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 4
		leaderSM := &applyCounter{memSM: newMemSM(), value: "once", c: make(chan int, 4)}
		c, imgs := newImageBubble(t, journaltest.Options{
			NewStateMachine: func(id uint64) journal.StateMachine {
				if id == 1 {
					return leaderSM
				}
				return newMemSM()
			},
		}, window)
		n1 := c.Node(1)
		propose(t, n1, "warm-up")
		for _, n := range c.Nodes() {
			require.NoError(t, n.Journal().ReadBarrier(ctxFor(t, 5*time.Second)))
		}

		// Node 2 still sends to the leader, but hears nothing back.
		c.cutOneWay(1, 2)
		f := c.Node(2)
		proposed := make(chan error, 1)
		go func() {
			_, _, err := f.Journal().Propose(ctxFor(t, 60*time.Second), []byte("once"))
			proposed <- err
		}()
		select {
		case n := <-leaderSM.c:
			require.Equal(t, 1, n, "the forwarded copy applied on the leader")
		case <-time.After(10 * time.Second):
			t.Fatal("the forwarded proposal did not apply on the leader")
		}
		// Compact the leader's log past everything node 2 has: two images the
		// margin apart, with writes between.
		for round := range 2 {
			for i := range 2 * window {
				propose(t, n1, fmt.Sprintf("fill-%d-%d", round, i))
			}
			checkpoint(t, n1, imgs.of(1))
		}
		first, err := n1.Journal().FirstIndex()
		require.NoError(t, err)
		require.Greater(t, first, f.Journal().Status().Applied+1, "the leader's log starts past node 2's")
		c.heal()

		select {
		case err := <-proposed:
			require.ErrorIs(t, err, journal.ErrOutcomeUnknown)
		case <-time.After(45 * time.Second):
			t.Fatal("the proposal on node 2 did not end")
		}
		require.Positive(t, imgs.of(2).installCount(), "node 2 caught up from an image")
		requireAppliedOnce(t, c, n1, "once")
		select {
		case n := <-leaderSM.c:
			t.Fatalf("the leader applied the write %d times", n)
		default:
		}
	})
}
