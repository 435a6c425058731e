package journal

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// The cluster's first membership change records the bootstrap member's
// window; no later change alters it; every record, image blob and restore
// carries it; a record without one (a cluster bootstrapped before it was
// recorded) leaves each member its own.
func TestTheClusterWindowIsRecordedOnceAndCarriedByEveryRecord(t *testing.T) {
	add := func(id uint64) *raftpb.ConfChange {
		return &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(id)}
	}
	m := newMembership()
	m.apply(1, add(1), confContext{Addr: "a", Window: 20}, &raftpb.ConfState{Voters: []uint64{1}})
	require.Equal(t, uint64(20), m.Window)
	m = m.clone()
	m.apply(2, add(2), confContext{Addr: "b", Window: 5}, &raftpb.ConfState{Voters: []uint64{1, 2}})
	require.Equal(t, uint64(20), m.Window, "a later change does not alter the window")
	got, err := decodeMembership(m.encode())
	require.NoError(t, err)
	require.Equal(t, uint64(20), got.windowOr(5))

	restored, err := NewClusterMembership(m.encode(), 9, 7, "c")
	require.NoError(t, err)
	got, err = decodeMembership(restored)
	require.NoError(t, err)
	require.Equal(t, uint64(20), got.Window, "a restore keeps the cluster's window")

	old, err := decodeMembership([]byte(`{"v":1,"index":3,"voters":[1],"members":{"1":{"id":1,"addr":"a"}}}`))
	require.NoError(t, err)
	require.Equal(t, uint64(5), old.windowOr(5), "a record without a window leaves the member's own")
	var none *membership
	require.Equal(t, uint64(5), none.windowOr(5))
}
