package offline_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/internal/membership"
	"github.com/metatree/metatree/journal/journaltest"
	"github.com/metatree/metatree/journal/offline"
)

// seedImages is the Snapshots of a seeded dir: the image Seed started the
// log from, and nothing to fetch.
type seedImages struct {
	index uint64
	blob  []byte
}

func (s seedImages) LoadLatest(context.Context, uint64) (uint64, []byte, error) {
	return s.index, s.blob, nil
}
func (seedImages) Fetch(context.Context, string, uint64) error { return journal.ErrUnknownMember }
func (seedImages) Install(context.Context, uint64) error       { return journal.ErrUnknownMember }

// nopSM is a state machine that applies nothing.
type nopSM struct{}

func (nopSM) Apply(uint64, []byte) any { return nil }

// loneTransport is the transport of a cluster of one node: it sends
// nothing and keeps the Receiver Open starts it with, for the test to
// deliver messages through.
type loneTransport struct{ recv journal.Receiver }

func (l *loneTransport) Start(_ uint64, r journal.Receiver) error { l.recv = r; return nil }
func (*loneTransport) SetPeer(uint64, string)                     {}
func (*loneTransport) RemovePeer(uint64)                          {}
func (*loneTransport) Send([]*raftpb.Message)                     {}
func (*loneTransport) Forward(context.Context, uint64, *journal.ForwardRequest) (*journal.ForwardResponse, error) {
	return nil, journal.ErrUnreachable
}
func (*loneTransport) Join(context.Context, string, *journal.JoinRequest) (*journal.JoinResponse, error) {
	return nil, journal.ErrUnreachable
}
func (*loneTransport) Close() error { return nil }

// TestRestoredClusterKeepsItsVersionAndRefusesOldMembers: a cluster seeded
// from an image of a cluster at format version 2, with voters 1 to 3 and
// node 5 removed, starts at version 2 with node 1 alone, and refuses the
// messages of every member it does not list: the old voters 2 and 3 (a
// MsgApp at a higher term included) and the removed node 5.
func TestRestoredClusterKeepsItsVersionAndRefusesOldMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const index, term = 40, 7
		old := membership.New()
		old.Index = index
		old.Voters = []uint64{1, 2, 3}
		old.Learner = []uint64{4}
		for id := uint64(1); id <= 4; id++ {
			old.Members[id] = journal.Member{ID: id, Addr: "old", Role: journal.Follower, MaxVersion: 2}
		}
		old.Removed = []uint64{5}
		old.Version = 2
		blob, err := offline.NewClusterMembership(old.Encode(), "", index, 1, "n1")
		require.NoError(t, err)
		m, err := membership.Decode(blob)
		require.NoError(t, err)
		require.Equal(t, uint32(2), m.ClusterVersion(), "the cluster version never goes down")
		require.ElementsMatch(t, []uint64{2, 3, 4, 5}, m.Removed)
		require.Equal(t, []uint64{1}, m.Voters)

		fs := vfs.NewMem()
		require.NoError(t, offline.Seed(offline.SeedConfig{FS: fs, Dir: "/n1", ID: 1, Addr: "n1", ClusterID: "c1", Token: "t",
			Index: index, Term: term, Membership: blob}))
		tr := &loneTransport{}
		j, err := journal.Open(t.Context(), journal.Config{
			ID: 1, Dir: "/n1", Addr: "n1", FS: fs, StateMachine: nopSM{}, Snapshots: seedImages{index, blob}, Transport: tr,
			TickInterval: 10 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2,
		})
		require.NoError(t, err)
		defer j.Close()
		st := j.Status()
		require.Equal(t, uint32(2), st.ClusterVersion)
		for _, from := range []uint64{2, 3, 4, 5} {
			err := tr.recv.Receive(t.Context(), []*raftpb.Message{{
				Type: raftpb.MsgApp.Enum(), From: new(from), To: new(uint64(1)), Term: new(uint64(term + 10)),
				Index: new(uint64(index)), LogTerm: new(uint64(term)), Commit: new(uint64(index)),
			}})
			require.ErrorIs(t, err, journal.ErrRemoved, "a message from old member %d", from)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		require.NoError(t, journaltest.AwaitLeading(ctx, j), "the seeded node")
		require.NoError(t, j.Close())
	})
}

// A restore keeps the cluster's dedupe window, which the old image's
// membership records.
func TestNewClusterMembershipKeepsTheClusterWindow(t *testing.T) {
	add := func(id uint64) *raftpb.ConfChange {
		return &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(id)}
	}
	m := membership.New()
	m.Apply(1, add(1), membership.ConfContext{Addr: "a", Window: 20}, &raftpb.ConfState{Voters: []uint64{1}})
	restored, err := offline.NewClusterMembership(m.Encode(), "c-old", 9, 7, "c")
	require.NoError(t, err)
	got, err := membership.Decode(restored)
	require.NoError(t, err)
	require.Equal(t, uint64(20), got.Window, "a restore keeps the cluster's window")
	require.Equal(t, uint64(9), got.Index)
	require.Equal(t, []uint64{7}, got.Voters)
	require.Equal(t, []uint64{1}, got.Removed, "the old member is removed")
}

// A restore's cluster replaces the backup's and those it replaced, the
// newest membership.MaxReplaced of them; a conf change carries the list.
func TestNewClusterMembershipRecordsTheClustersItReplaces(t *testing.T) {
	blob, err := offline.NewClusterMembership(nil, "c0", 9, 7, "c")
	require.NoError(t, err)
	for i := 1; i <= membership.MaxReplaced; i++ {
		blob, err = offline.NewClusterMembership(blob, fmt.Sprintf("c%d", i), 9, 7, "c")
		require.NoError(t, err)
	}
	got, err := membership.Decode(blob)
	require.NoError(t, err)
	want := make([]string, 0, membership.MaxReplaced)
	for i := 1; i <= membership.MaxReplaced; i++ {
		want = append(want, fmt.Sprintf("c%d", i))
	}
	require.Equal(t, want, got.Replaced, "the newest, oldest first")

	next := got.Clone()
	next.Apply(10, &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(uint64(8))}, membership.ConfContext{Addr: "d"}, &raftpb.ConfState{Voters: []uint64{7, 8}})
	require.Equal(t, want, next.Replaced, "a later record carries it")

	plain, err := offline.NewClusterMembership(nil, "", 9, 7, "c")
	require.NoError(t, err)
	got, err = membership.Decode(plain)
	require.NoError(t, err)
	require.Empty(t, got.Replaced, "no cluster named: none replaced")
}
