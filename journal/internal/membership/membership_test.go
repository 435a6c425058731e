package membership

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// The cluster's first membership change records the bootstrap member's
// window; no later change alters it; every record and image blob carries
// it (a restore keeps it: journal/offline's tests); a record without one
// (a cluster bootstrapped before it was recorded) leaves each member its
// own.
func TestTheClusterWindowIsRecordedOnceAndCarriedByEveryRecord(t *testing.T) {
	add := func(id uint64) *raftpb.ConfChange {
		return &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(id)}
	}
	m := New()
	m.Apply(1, add(1), ConfContext{Addr: "a", Window: 20}, &raftpb.ConfState{Voters: []uint64{1}})
	require.Equal(t, uint64(20), m.Window)
	m = m.Clone()
	m.Apply(2, add(2), ConfContext{Addr: "b", Window: 5}, &raftpb.ConfState{Voters: []uint64{1, 2}})
	require.Equal(t, uint64(20), m.Window, "a later change does not alter the window")
	got, err := Decode(m.Encode())
	require.NoError(t, err)
	require.Equal(t, uint64(20), got.WindowOr(5))

	old, err := Decode([]byte(`{"v":1,"index":3,"voters":[1],"members":{"1":{"id":1,"addr":"a"}}}`))
	require.NoError(t, err)
	require.Equal(t, uint64(5), old.WindowOr(5), "a record without a window leaves the member's own")
	var none *Membership
	require.Equal(t, uint64(5), none.WindowOr(5))
}
