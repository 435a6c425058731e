package journal

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
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
		c := newCluster(t)
		imgs := map[uint64]*fakeImages{}
		withImages := imagesFor(imgs, window)
		leaderSM := &applyCounter{memSM: newMemSM(), value: "once", c: make(chan int, 4)}
		n1 := c.listen(1)
		n1.sm = leaderSM.memSM
		opt1 := withImages(n1)
		require.NoError(t, c.open(n1, func(cfg *Config) { opt1(cfg); cfg.Bootstrap, cfg.StateMachine = true, leaderSM }))
		c.waitLeader(1)
		for id := uint64(2); id <= 3; id++ {
			n := c.listen(id)
			opt := withImages(n)
			require.NoError(t, c.open(n, func(cfg *Config) { opt(cfg); cfg.Join = n1.addr }))
		}
		propose(t, n1, "warm-up")
		for _, n := range c.nodes {
			require.NoError(t, n.j.ReadBarrier(ctxT(t, 5*time.Second)))
		}

		// Node 2 still sends to the leader, but hears nothing back.
		c.mu.Lock()
		c.oneWay = map[[2]uint64]bool{{1, 2}: true}
		c.mu.Unlock()
		f := c.nodes[2]
		proposed := make(chan error, 1)
		go func() {
			_, _, err := f.j.Propose(ctxT(t, 60*time.Second), []byte("once"))
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
			checkpoint(t, n1, imgs[1])
		}
		first, err := n1.j.FirstIndex()
		require.NoError(t, err)
		require.Greater(t, first, f.j.Status().Applied+1, "the leader's log starts past node 2's")
		c.heal()

		select {
		case err := <-proposed:
			require.ErrorIs(t, err, ErrOutcomeUnknown)
		case <-time.After(45 * time.Second):
			t.Fatal("the proposal on node 2 did not end")
		}
		require.Positive(t, imgs[2].installCount(), "node 2 caught up from an image")
		requireAppliedOnce(t, c, n1, "once")
		select {
		case n := <-leaderSM.c:
			t.Fatalf("the leader applied the write %d times", n)
		default:
		}
	})
}
