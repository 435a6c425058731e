package journal

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/dedupe"
)

// applyCounter counts the applies of one value and tells of each.
type applyCounter struct {
	*memSM
	value string
	mu    sync.Mutex
	n     int
	c     chan int // the count after each apply of value
}

func (a *applyCounter) Apply(index uint64, data []byte) any {
	v := a.memSM.Apply(index, data)
	if string(data) == a.value {
		a.mu.Lock()
		a.n++
		n := a.n
		a.mu.Unlock()
		a.c <- n
	}
	return v
}

// A follower that does not apply its forwarded proposal within two
// election timeouts proposes it again under the same key. When that copy
// lands more than DedupeWindow entries after the first, it is still not
// applied again: the leader applies one copy, not two.
func TestReproposalAWindowLaterAppliesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 8
		c := newCluster(t)
		key := [16]byte{0xaa, 4}
		leaderSM := &applyCounter{memSM: newMemSM(), value: "dup-me", c: make(chan int, 4)}
		skipped := make(chan dedupe.Verdict, 4)
		reproposing, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		gate := &gateSM{memSM: newMemSM(), gate: make(chan struct{})}
		t.Cleanup(gate.open)

		n1 := c.listen(1)
		n1.sm = leaderSM.memSM
		require.NoError(t, c.open(n1, func(cfg *Config) {
			cfg.Bootstrap, cfg.StateMachine, cfg.DedupeWindow = true, leaderSM, window
			cfg.knobs = &testingKnobs{judged: func(_ uint64, k [16]byte, v dedupe.Verdict) {
				if k == key {
					skipped <- v
				}
			}}
		}))
		c.waitLeader(1)
		for id := uint64(2); id <= 3; id++ {
			n := c.listen(id)
			require.NoError(t, c.open(n, func(cfg *Config) { cfg.Join, cfg.DedupeWindow = n1.addr, window }))
		}
		f := c.nodes[2]
		f.closeJournal()
		f.sm = gate.memSM
		require.NoError(t, c.open(f, func(cfg *Config) {
			cfg.StateMachine, cfg.DedupeWindow = gate, window
			cfg.knobs = &testingKnobs{beforeRepropose: func(k [16]byte) {
				if k == key {
					select {
					case reproposing <- struct{}{}:
					default:
					}
					<-release
				}
			}}
		}))
		c.waitLeader(1)

		type result struct {
			index uint64
			err   error
		}
		proposed := make(chan result, 1)
		go func() {
			idx, _, err := f.j.ProposeWithKey(ctxT(t, 30*time.Second), key, []byte("dup-me"))
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

// requireAppliedOnce proposes a barrier on leader and checks that every
// node of c, caught up to it, holds value exactly once.
func requireAppliedOnce(t *testing.T, c *cluster, leader *node, value string) {
	t.Helper()
	propose(t, leader, "barrier")
	for _, n := range c.nodes {
		require.NoError(t, n.j.ReadBarrier(ctxT(t, 5*time.Second)))
		count := 0
		for _, v := range n.sm.values() {
			if v == value {
				count++
			}
		}
		require.Equal(t, 1, count, "node %d holds %q once", n.id, value)
	}
}
