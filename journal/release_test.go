package journal

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
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
		c := newCluster(t)
		registry := &sync.Map{}
		newImages := func(n *node) *fakeImages {
			f := &fakeImages{sm: func() *memSM { return n.sm }, images: map[uint64]fakeImage{}, registry: registry, requests: make(chan struct{}, 1)}
			registry.Store(n.addr, f)
			return f
		}
		n1 := c.listen(1)
		imgs1 := newImages(n1)
		require.NoError(t, c.open(n1, func(cfg *Config) { cfg.Snapshots = imgs1; cfg.Bootstrap = true }))
		c.waitLeader(1)
		n2 := c.listen(2)
		imgs2 := &releasingImages{fakeImages: newImages(n2), released: make(chan uint64, 4)}
		require.NoError(t, c.open(n2, func(cfg *Config) { cfg.Snapshots = imgs2; cfg.Join = n1.addr }))
		for i := range 5 {
			propose(t, n1, string(rune('a'+i)))
		}
		idx := checkpoint(t, n1, imgs1)
		require.NoError(t, n2.j.WaitApplied(ctxT(t, 5*time.Second), idx))

		im := imgs1.images[idx]
		m, err := decodeMembership(im.membership)
		require.NoError(t, err)
		term, err := n1.j.TermAt(idx)
		require.NoError(t, err)
		msg := &raftpb.Message{
			Type: raftpb.MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(n1.j.Status().Term),
			Snapshot: &raftpb.Snapshot{Data: im.membership, Metadata: &raftpb.SnapshotMetadata{
				Index: new(idx), Term: new(term), ConfState: m.confState(),
			}},
		}
		require.NoError(t, n2.j.receive(ctxT(t, 5*time.Second), []*raftpb.Message{msg}))
		require.Equal(t, 1, imgs2.fetches, "the image was fetched before raft saw the message")
		select {
		case got := <-imgs2.released:
			require.Equal(t, idx, got)
		case <-time.After(10 * time.Second):
			t.Fatal("the image raft ignored was never released")
		}
		require.Zero(t, imgs2.installs)
		propose(t, n2, "after")
	})
}
