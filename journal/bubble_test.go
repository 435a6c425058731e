package journal_test

import (
	"bytes"
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/journaltest"
)

// The cluster tests in synctest bubbles run on journaltest's default
// timing: a 10 ms tick, 20 ticks to an election timeout.
const (
	bubbleTick          = 10 * time.Millisecond
	bubbleElectionTicks = 20
)

// afterTicks lets the bubble's time run n ticks on, and every goroutine
// settle.
func afterTicks(n int) {
	time.Sleep(time.Duration(n) * bubbleTick)
	synctest.Wait()
}

// awaitTicks waits, a tick at a time, until cond holds, and fails the
// test if it does not within bound ticks of the bubble's time.
func awaitTicks(t *testing.T, bound int, what string, cond func() bool) {
	t.Helper()
	synctest.Wait()
	for k := 0; !cond(); k++ {
		require.Less(t, k, bound, "%s: not within %d ticks", what, bound)
		afterTicks(1)
	}
}

// applied reports whether node n's Recorder (of its current or last run)
// applied v.
func applied(n *journaltest.Node, v string) bool {
	for _, a := range n.StateMachine().(*journaltest.Recorder).Applied() {
		if string(a.Data) == v {
			return true
		}
	}
	return false
}

// appliedData returns what node n's Recorder applied, in order.
func appliedData(n *journaltest.Node) []string {
	var out []string
	for _, a := range n.StateMachine().(*journaltest.Recorder).Applied() {
		out = append(out, string(a.Data))
	}
	return out
}

// proposeVia proposes v through node n and checks that the write returns
// its own data, applied on n before Propose returned.
func proposeVia(ctx context.Context, t *testing.T, n *journaltest.Node, v string) uint64 {
	t.Helper()
	idx, val, err := n.Journal().Propose(ctx, []byte(v))
	require.NoError(t, err, "propose %q through node %d", v, n.ID)
	b, _ := val.([]byte)
	require.True(t, bytes.Equal([]byte(v), b), "node %d answered %v for %q", n.ID, val, v)
	require.True(t, applied(n, v), "node %d applied its own write %q before returning", n.ID, v)
	return idx
}
