package journal_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/journaltest"
)

// memSM is a trivial state machine recording what it applied, by index,
// that a fakeImages loads an image into. Apply answers "ok:" and the data.
type memSM struct {
	mu   sync.Mutex
	ents map[uint64]string
	last uint64
}

func newMemSM() *memSM { return &memSM{ents: map[uint64]string{}} }

// mem returns s; a state machine embedding a *memSM has it too, so that a
// fakeImages finds the memSM to load an image into.
func (s *memSM) mem() *memSM { return s }

func (s *memSM) Apply(index uint64, data []byte) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index <= s.last {
		panic(fmt.Sprintf("apply %d after %d", index, s.last))
	}
	s.last = index
	s.ents[index] = string(data)
	return "ok:" + string(data)
}

// values returns what s holds, in index order.
func (s *memSM) values() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i := uint64(0); i <= s.last; i++ {
		if v, ok := s.ents[i]; ok {
			out = append(out, v)
		}
	}
	return out
}

// has reports whether s holds v.
func (s *memSM) has(v string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.ents {
		if x == v {
			return true
		}
	}
	return false
}

// smOf returns the memSM of node n's current (or last) run.
func smOf(n *journaltest.Node) *memSM {
	return n.StateMachine().(interface{ mem() *memSM }).mem()
}

// propose proposes v through n, whose state machine has a memSM, and
// checks that the write returns the memSM's answer, applied on n before
// Propose returned.
func propose(t *testing.T, n *journaltest.Node, v string) uint64 {
	t.Helper()
	idx, val, err := n.Journal().Propose(ctxFor(t, 5*time.Second), []byte(v))
	require.NoError(t, err, "propose %q through node %d", v, n.ID)
	require.Equal(t, "ok:"+v, val)
	require.True(t, smOf(n).has(v), "node %d applied its own write %q before returning", n.ID, v)
	return idx
}

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

// requireAppliedOnce proposes a barrier on leader and checks that every
// node of c, caught up to it, holds value exactly once.
func requireAppliedOnce(t *testing.T, c *httpBubble, leader *journaltest.Node, value string) {
	t.Helper()
	propose(t, leader, "barrier")
	for _, n := range c.Nodes() {
		require.NoError(t, n.Journal().ReadBarrier(ctxFor(t, 5*time.Second)))
		count := 0
		for _, v := range smOf(n).values() {
			if v == value {
				count++
			}
		}
		require.Equal(t, 1, count, "node %d holds %q once", n.ID, value)
	}
}

// gateSM blocks Apply while the gate is closed.
type gateSM struct {
	*memSM
	mu   sync.Mutex
	gate chan struct{}
}

// open lets Apply through; it is idempotent (a failed test's cleanup opens
// the gate so Close can stop the applier).
func (g *gateSM) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

func (g *gateSM) Apply(index uint64, data []byte) any {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return g.memSM.Apply(index, data)
}
