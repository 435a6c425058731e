package journal_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/journaltest"
)

// A follower that does not apply its forwarded proposal within two
// election timeouts proposes it again under the same key. When that copy
// lands more than DedupeWindow entries after the first, it is still not
// applied again: the leader applies one copy, not two.
func TestReproposalAWindowLaterAppliesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 8
		key := [16]byte{0xaa, 4}
		leaderSM := &applyCounter{memSM: newMemSM(), value: "dup-me", c: make(chan int, 4)}
		skipped := make(chan dedupe.Verdict, 4)
		reproposing, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		gate := &gateSM{memSM: newMemSM(), gate: make(chan struct{})}
		t.Cleanup(gate.open)
		c := newHTTPBubble(t, journaltest.Options{
			NewStateMachine: func(id uint64) journal.StateMachine {
				if id == 1 {
					return leaderSM
				}
				return newMemSM()
			},
			Configure: func(cfg *journal.Config) {
				cfg.DedupeWindow = window
				if cfg.ID == 1 {
					journal.SetKnobsForTest(cfg, journal.KnobsForTest{Judged: func(_ uint64, k [16]byte, v dedupe.Verdict) {
						if k == key {
							skipped <- v
						}
					}})
				}
			},
		})
		n1, f := c.Node(1), c.Node(2)
		c.stop(t, 2)
		require.NoError(t, c.restart(t, 2, func(cfg *journal.Config) {
			cfg.StateMachine = gate
			journal.SetKnobsForTest(cfg, journal.KnobsForTest{BeforeRepropose: func(k [16]byte) {
				if k == key {
					select {
					case reproposing <- struct{}{}:
					default:
					}
					<-release
				}
			}})
		}))
		require.Equal(t, uint64(1), c.leader(t).ID)

		type result struct {
			index uint64
			err   error
		}
		proposed := make(chan result, 1)
		go func() {
			idx, _, err := f.Journal().ProposeWithKey(ctxFor(t, 30*time.Second), key, []byte("dup-me"))
			proposed <- result{idx, err}
		}()
		require.Equal(t, 1, <-leaderSM.c, "the first copy applied on the leader")
		<-reproposing // the follower, still not applying, proposes it again
		for i := range window + 2 {
			propose(t, n1, fmt.Sprintf("filler-%d", i))
		}
		once.Do(func() { close(release) })
		select {
		case v := <-skipped:
			require.Equal(t, dedupe.Expired, v, "the copy a window later expired")
		case n := <-leaderSM.c:
			t.Fatalf("the leader applied the re-proposed copy: %d applies", n)
		}
		gate.open()
		r := <-proposed
		require.NoError(t, r.err)
		requireAppliedOnce(t, c, n1, "dup-me")
	})
}
