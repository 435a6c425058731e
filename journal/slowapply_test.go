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

// A follower whose state machine is stuck keeps ticking, persisting and
// acknowledging once its apply queue is full: the leader, which needs it
// for a quorum, keeps committing, and nobody starts an election. Only the
// committed entries wait, and the queue stays within its bound.
func TestSlowApplyDoesNotStopRaft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newHTTPBubble(t, journaltest.Options{NewStateMachine: func(uint64) journal.StateMachine { return newMemSM() }})
		leader := c.leader(t).ID
		var slow, cut uint64
		for id := uint64(1); id <= 3; id++ {
			if id != leader {
				if slow == 0 {
					slow = id
				} else {
					cut = id
				}
			}
		}
		n := c.Node(slow)
		gate := &gateSM{memSM: newMemSM(), gate: make(chan struct{})}
		t.Cleanup(gate.open) // before the cluster's cleanup closes the nodes
		c.stop(t, slow)
		const queueBytes, perReady, entryBytes, entries = 4 << 10, 1 << 10, 512, 60
		require.NoError(t, c.restart(t, slow, func(cfg *journal.Config) {
			cfg.StateMachine = gate
			cfg.ApplyQueueBytes, cfg.ApplyQueueBatches, cfg.MaxCommittedBytesPerReady = queueBytes, 4, perReady
		}))
		c.partition(cut) // the leader now needs the slow node for every commit
		lj := c.Node(leader).Journal()
		term := lj.Status().Term
		for i := range entries {
			data := fmt.Appendf(make([]byte, 0, entryBytes), "s%d-", i)
			data = data[:entryBytes]
			_, _, err := lj.Propose(ctxFor(t, 5*time.Second), data)
			require.NoError(t, err, "entry %d: the slow node still acknowledges", i)
		}
		j := n.Journal()
		full, queued, batches := j.ApplyQueueForTest()
		require.True(t, full, "the entries (%d bytes) filled the slow node's apply queue", entries*entryBytes)
		require.LessOrEqual(t, queued, uint64(queueBytes+perReady+2*(entryBytes+64)), "the queue stays within its bound")
		require.LessOrEqual(t, batches, 4)
		st := j.Status()
		require.Greater(t, st.Committed, st.Applied+uint64(queueBytes/entryBytes), "the slow node persisted entries it has not queued")
		lst := lj.Status()
		require.Equal(t, leader, lst.Leader)
		require.Equal(t, term, lst.Term, "no election while a follower's apply is stuck")
		require.Zero(t, j.CampaignsForTest())
		gate.open()
		require.NoError(t, j.WaitApplied(ctxFor(t, 5*time.Second), st.Committed))
		c.heal()
		require.NoError(t, j.ReadBarrier(ctxFor(t, 5*time.Second)))
		last := fmt.Appendf(make([]byte, 0, entryBytes), "s%d-", entries-1)
		require.True(t, gate.has(string(last[:entryBytes])))
	})
}
