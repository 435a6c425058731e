package journal_test

import (
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/internal/raftstore"
	"github.com/metatree/metatree/journal/journaltest"
)

// newImageNode starts a one-node cluster on disk whose node has imgs,
// each start adjusted by mod.
func newImageNode(t *testing.T, imgs *fakeImages, mod func(cfg *journal.Config)) *httpBubble {
	return newHTTPBubble(t, journaltest.Options{
		Voters: 1, OnDisk: true,
		NewStateMachine: func(uint64) journal.StateMachine { return newMemSM() },
		Configure: func(cfg *journal.Config) {
			imgs.bind(cfg)
			if mod != nil {
				mod(cfg)
			}
		},
	})
}

// imageOfNow is an image of node n's state machine at index, with the
// membership blob n gives for it.
func imageOfNow(t *testing.T, n *journaltest.Node, index uint64) fakeImage {
	blob, err := n.Journal().MembershipBlobAtForTest(index)
	require.NoError(t, err)
	sm := smOf(n)
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return fakeImage{index: index, ents: maps.Clone(sm.ents), membership: blob}
}

// An image written just before a power cut can be ahead of the durable
// commit index (the HardState carrying the commit had not been written
// yet), and is not raft's snapshot yet. Every entry it holds was applied,
// so committed: Open raises the durable commit to it and raft restarts
// from it (raft cannot start with Applied past its commit).
func TestRestartFromImageAheadOfDurableCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		imgs := newFakeImages(&sync.Map{})
		c := newImageNode(t, imgs, func(cfg *journal.Config) { cfg.StaleAfter = time.Hour })
		n1 := c.Node(1)
		for i := range 5 {
			propose(t, n1, fmt.Sprintf("v%d", i))
		}
		idx := n1.Journal().Status().Applied
		imgs.put(imageOfNow(t, n1, idx))
		want := smOf(n1).values()
		c.stop(t, 1)

		// The HardState as a power cut before its write leaves it.
		st, err := raftstore.Open(raftstore.Options{Dir: filepath.Join(n1.Dir, "journal")})
		require.NoError(t, err)
		hs := st.HardState()
		require.GreaterOrEqual(t, hs.GetCommit(), idx)
		hs.Commit = new(idx - 2)
		require.NoError(t, st.Append(hs, nil, nil, true))
		require.NoError(t, st.Close())

		require.NoError(t, c.restart(t, 1, nil))
		require.Equal(t, want, smOf(n1).values(), "loaded from the image")
		require.GreaterOrEqual(t, n1.Journal().DurableCommitForTest(), idx, "the durable commit covers the image")
		c.leader(t)
		propose(t, n1, "after")
		require.Equal(t, append(want, "after"), smOf(n1).values())
	})
}

// A state loaded at an index the log no longer reaches is refused, naming
// it, rather than started with a gap.
func TestRestartRefusesStateOutsideTheLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		imgs := newFakeImages(&sync.Map{})
		c := newImageNode(t, imgs, nil)
		n1 := c.Node(1)
		propose(t, n1, "a")
		last := n1.Journal().Status().Applied
		blob, err := n1.Journal().MembershipBlobAtForTest(last)
		require.NoError(t, err)
		c.stop(t, 1)
		// An image past every entry of the log (a log that lost its tail).
		imgs.put(fakeImage{index: last + 100, ents: map[uint64]string{}, membership: blob})
		err = c.restart(t, 1, nil)
		require.ErrorContains(t, err, fmt.Sprintf("loaded at index %d, past the log's last entry %d", last+100, last))
	})
}
