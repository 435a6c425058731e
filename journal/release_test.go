package journal_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// releasingImages records the images the journal releases.
type releasingImages struct {
	*fakeImages
	released chan uint64
}

func (r *releasingImages) ReleaseFetched(index uint64) { r.released <- index }

// A snapshot raft ignores (the follower has its index committed already)
// has its fetched image released: no Install will come for it.
func TestIgnoredSnapshotIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		registry := &sync.Map{}
		imgs1 := newFakeImages(registry)
		imgs2 := &releasingImages{fakeImages: newFakeImages(registry), released: make(chan uint64, 4)}
		c := newHTTPBubble(t, journaltest.Options{
			Voters:          2,
			NewStateMachine: func(uint64) journal.StateMachine { return newMemSM() },
			Configure: func(cfg *journal.Config) {
				if cfg.ID == 1 {
					imgs1.bind(cfg)
					return
				}
				imgs2.bind(cfg)
				cfg.Snapshots = imgs2
			},
		})
		n1, n2 := c.Node(1), c.Node(2)
		for i := range 5 {
			propose(t, n1, string(rune('a'+i)))
		}
		idx := checkpoint(t, n1, imgs1)
		require.NoError(t, n2.Journal().WaitApplied(ctxFor(t, 5*time.Second), idx))

		im, ok := imgs1.image(idx)
		require.True(t, ok)
		cs, err := journal.ConfStateOfBlobForTest(im.membership)
		require.NoError(t, err)
		term, err := n1.Journal().TermAt(idx)
		require.NoError(t, err)
		msg := &raftpb.Message{
			Type: raftpb.MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(n1.Journal().Status().Term),
			Snapshot: &raftpb.Snapshot{Data: im.membership, Metadata: &raftpb.SnapshotMetadata{
				Index: new(idx), Term: new(term), ConfState: cs,
			}},
		}
		require.NoError(t, n2.Journal().ReceiveForTest(ctxFor(t, 5*time.Second), []*raftpb.Message{msg}))
		require.Equal(t, 1, imgs2.fetchCount(), "the image was fetched before raft saw the message")
		select {
		case got := <-imgs2.released:
			require.Equal(t, idx, got)
		case <-time.After(10 * time.Second):
			t.Fatal("the image raft ignored was never released")
		}
		require.Zero(t, imgs2.installCount())
		propose(t, n2, "after")
	})
}
