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

// A proposal forwarded inside raft's stream is admitted only with user
// entries: a membership change must go through HandleForward's checks, and
// only the leader journals its clock.
func TestForwardedProposalChecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 3})
		ctx := ctxFor(t, time.Minute)
		leader, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		from := leader%3 + 1
		ln := c.Node(leader)
		prop := func(e *raftpb.Entry) []*raftpb.Message {
			return []*raftpb.Message{{Type: raftpb.MsgProp.Enum(), From: new(from), To: new(leader), Entries: []*raftpb.Entry{e}}}
		}
		cc, err := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(leader)})
		require.NoError(t, err)
		for name, e := range map[string]*raftpb.Entry{
			"conf change": {Type: raftpb.EntryConfChange.Enum(), Data: cc},
			"timestamp":   {Data: journal.EncodeTimestampForTest(time.Now().UnixNano())},
			"garbage":     {Data: []byte{9, 9, 9}},
		} {
			err := ln.Journal().ReceiveForTest(ctx, prop(e))
			require.ErrorIs(t, err, journal.ErrMalformed, name)
			require.Contains(t, err.Error(), "forwarded proposal", name)
		}
		key := [16]byte{7}
		require.NoError(t, ln.Journal().ReceiveForTest(ctx, prop(&raftpb.Entry{Data: journal.EncodeUserForTest(key, []byte("forwarded"))})))
		proposeVia(ctx, t, ln, "after")
		require.True(t, applied(ln, "forwarded"), "a user entry forwarded in the stream is applied")
		require.Len(t, ln.Journal().Status().Members, 3, "no membership change slipped through")
	})
}
