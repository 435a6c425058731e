package journal

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/quorum"
	"go.etcd.io/raft/v3/tracker"
)

func TestSuccessor(t *testing.T) {
	status := func(voters []uint64, learners []uint64, prs map[uint64]tracker.Progress) raft.Status {
		var st raft.Status
		st.ID = 1
		st.Config.Voters[0] = quorum.MajorityConfig{}
		for _, v := range voters {
			st.Config.Voters[0][v] = struct{}{}
		}
		st.Config.Learners = map[uint64]struct{}{}
		for _, l := range learners {
			st.Config.Learners[l] = struct{}{}
		}
		st.Progress = prs
		return st
	}
	for _, tc := range []struct {
		name string
		st   raft.Status
		want uint64
	}{
		{"alone", status([]uint64{1}, nil, map[uint64]tracker.Progress{1: {Match: 9}}), 0},
		{"furthest match", status([]uint64{1, 2, 3}, nil, map[uint64]tracker.Progress{
			1: {Match: 9}, 2: {Match: 7, RecentActive: true}, 3: {Match: 8, RecentActive: true}}), 3},
		{"tie: lowest id", status([]uint64{1, 2, 3}, nil, map[uint64]tracker.Progress{
			1: {Match: 9}, 2: {Match: 9, RecentActive: true}, 3: {Match: 9, RecentActive: true}}), 2},
		{"active before inactive", status([]uint64{1, 2, 3}, nil, map[uint64]tracker.Progress{
			1: {Match: 9}, 2: {Match: 9}, 3: {Match: 5, RecentActive: true}}), 3},
		{"never a learner", status([]uint64{1, 2}, []uint64{4}, map[uint64]tracker.Progress{
			1: {Match: 9}, 2: {Match: 3, RecentActive: true}, 4: {Match: 9, RecentActive: true, IsLearner: true}}), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, successor(tc.st))
		})
	}
}
