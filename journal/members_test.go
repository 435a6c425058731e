package journal

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A change that leaves no voter is refused wherever it can come from: the
// API (force or not), a forwarded request at the leader, and a log that
// already holds one (it bypassed both), which every replica and every
// restart applies as a no-op instead of panicking in raft ("removed all
// voters").
func TestLastVoterIsNeverRemoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		c.start(1, 1)
		c.waitLeader(1)
		n1, obs := c.nodes[1], c.nodes[2]
		ctx := ctxT(t, 10*time.Second)

		require.ErrorIs(t, n1.j.RemoveMember(ctx, 1, true), ErrUnsafeRemoval)
		require.ErrorIs(t, obs.j.RemoveMember(ctx, 1, true), ErrUnsafeRemoval, "refused before it is forwarded")
		forward := func(cc *raftpb.ConfChange) error {
			data, err := proto.Marshal(cc)
			require.NoError(t, err)
			_, err = n1.j.handleForward(ctx, &ForwardRequest{Kind: ForwardConfChange, Key: [16]byte{byte(cc.GetType()), 9}, Force: true, Data: data})
			return err
		}
		require.ErrorIs(t, forward(&raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(uint64(1))}), ErrUnsafeRemoval)
		require.ErrorIs(t, forward(&raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(1))}), ErrUnsafeRemoval,
			"demoting the last voter leaves none either")
		require.ErrorIs(t, forward(&raftpb.ConfChange{Type: raftpb.ConfChangeType(42).Enum(), NodeId: new(uint64(1))}), ErrMalformed)

		// Into the log behind the checks' back, as an older version or a
		// forged append would put it.
		key := [16]byte{0xdd}
		w := n1.j.addWaiter(key)
		cc := &raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(uint64(1)), Context: mustJSON(confContext{Key: key})}
		var perr error
		require.NoError(t, n1.j.do(ctx, func() { perr = n1.j.rn.ProposeConfChange(cc) }))
		require.NoError(t, perr)
		r := <-w
		n1.j.removeWaiter(key, w)
		require.ErrorIs(t, r.err, ErrUnsafeRemoval)
		propose(t, n1, "still-leading")
		propose(t, obs, "via-observer")
		require.Len(t, n1.j.Status().Members, 2)

		// A restart replays the entry and refuses it again.
		n1.closeJournal()
		n1.sm = newMemSM()
		require.NoError(t, c.open(n1, nil))
		c.waitLeader(1)
		propose(t, n1, "after-restart")
		require.True(t, n1.sm.has("still-leading"))
		require.Len(t, n1.j.Status().Members, 2)
	})
}
