package journal

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memSM is a trivial state machine recording what it applied.
type memSM struct {
	mu   sync.Mutex
	ents map[uint64]string
	last uint64
}

func newMemSM() *memSM { return &memSM{ents: map[uint64]string{}} }

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

// node is one journal an internal test opens alone, with its state
// machine. The cluster tests run on journaltest.Cluster in package
// journal_test (httpbubble_test.go).
type node struct {
	t  *testing.T
	id uint64
	sm *memSM
	j  *Journal
}

// The timing of the journals the internal tests open, on a synctest
// bubble's virtual clock: a 200 ms election timeout.
const (
	testTick          = 10 * time.Millisecond
	testElectionTicks = 20
)

// propose proposes v through n and checks that the write returns its
// state machine's answer, applied on n before Propose returned.
func propose(t *testing.T, n *node, v string) uint64 {
	t.Helper()
	idx, val, err := n.j.Propose(ctxT(t, 5*time.Second), []byte(v))
	require.NoError(t, err, "propose %q through node %d", v, n.id)
	require.Equal(t, "ok:"+v, val)
	require.True(t, n.sm.has(v), "node %d applied its own write %q before returning", n.id, v)
	return idx
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
