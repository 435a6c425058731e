package journal_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// Three voters and an observer: the bootstrap node leads, writes through
// every node return after their own apply, the observer is a raft learner,
// a node joins through any member (here the observer), and adding it again
// is a no-op with the same role and an error with another.
func TestClusterBasics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Observers: 1})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(1), leader)
		for id := uint64(1); id <= 4; id++ {
			idx := proposeVia(ctx, t, c.Node(id), fmt.Sprintf("w%d", id))
			require.GreaterOrEqual(t, c.Node(id).Journal().Status().Applied, idx)
		}
		voters, learners, err := c.Node(leader).Journal().RaftConfigForTest(ctx)
		require.NoError(t, err)
		require.Equal(t, []uint64{4}, learners)
		require.Equal(t, []uint64{1, 2, 3}, voters)

		// A node can join through any member, here an observer (the helper
		// forwards the membership change to the leader).
		sm := &journaltest.Recorder{}
		j5, err := journal.Open(ctx, journal.Config{
			ID: 5, Dir: "/node5", Addr: "node5", FS: vfs.NewMem(),
			Transport: c.Net.Transport("node5"), StateMachine: sm,
			Join: "node4", Role: journal.Observer,
		})
		require.NoError(t, err)
		defer func() { require.NoError(t, j5.Close()) }()
		require.NoError(t, j5.ReadBarrier(ctx))
		have := map[string]bool{}
		for _, a := range sm.Applied() {
			have[string(a.Data)] = true
		}
		for id := uint64(1); id <= 4; id++ {
			require.True(t, have[fmt.Sprintf("w%d", id)])
		}
		_, _, err = j5.Propose(ctx, []byte("w5"))
		require.NoError(t, err)
		st := c.Node(leader).Journal().Status()
		require.Len(t, st.Members, 5)
		require.Equal(t, journal.Observer, st.Members[4].Role)
		require.Equal(t, "node5", st.Members[4].Addr)
		// Adding it again with the same role is a no-op; another role is
		// an error (a joining node gets it at startup).
		require.NoError(t, c.Node(2).Journal().AddMember(ctx, 5, "node5", journal.Observer))
		require.ErrorIs(t, c.Node(2).Journal().AddMember(ctx, 5, "node5", journal.Follower), journal.ErrRoleMismatch)
	})
}
