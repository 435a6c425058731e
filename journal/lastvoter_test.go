package journal_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// A change that leaves no voter is refused wherever it can come from: the
// API (force or not), a forwarded request at the leader, and a log that
// already holds one (it bypassed both), which every replica and every
// restart applies as a no-op instead of panicking in raft ("removed all
// voters").
func TestLastVoterIsNeverRemoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, Observers: 1})
		ctx := ctxFor(t, time.Minute)
		n1, obs := c.Node(1), c.Node(2)

		require.ErrorIs(t, n1.Journal().RemoveMember(ctx, 1, true), journal.ErrUnsafeRemoval)
		require.ErrorIs(t, obs.Journal().RemoveMember(ctx, 1, true), journal.ErrUnsafeRemoval, "refused before it is forwarded")
		forward := func(cc *raftpb.ConfChange) error {
			data, err := proto.Marshal(cc)
			require.NoError(t, err)
			_, err = n1.Journal().HandleForwardForTest(ctx, &journal.ForwardRequest{Kind: journal.ForwardConfChange, Key: [16]byte{byte(cc.GetType()), 9}, Force: true, Data: data})
			return err
		}
		require.ErrorIs(t, forward(&raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(uint64(1))}), journal.ErrUnsafeRemoval)
		require.ErrorIs(t, forward(&raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(1))}), journal.ErrUnsafeRemoval,
			"demoting the last voter leaves none either")
		require.ErrorIs(t, forward(&raftpb.ConfChange{Type: raftpb.ConfChangeType(42).Enum(), NodeId: new(uint64(1))}), journal.ErrMalformed)

		// Into the log behind the checks' back, as an older version or a
		// forged append would put it.
		err := n1.Journal().ProposeConfChangeUncheckedForTest(ctx, raftpb.ConfChangeRemoveNode, 1, [16]byte{0xdd})
		require.ErrorIs(t, err, journal.ErrUnsafeRemoval)
		proposeVia(ctx, t, n1, "still-leading")
		proposeVia(ctx, t, obs, "via-observer")
		require.Len(t, n1.Journal().Status().Members, 2)

		// A restart replays the entry and refuses it again.
		require.NoError(t, c.Stop(1))
		require.NoError(t, c.Restart(ctx, 1))
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(1), leader)
		proposeVia(ctx, t, n1, "after-restart")
		require.True(t, applied(n1, "still-leading"))
		require.Len(t, n1.Journal().Status().Members, 2)
	})
}
