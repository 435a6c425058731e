package journal

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
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
func (seedImages) Fetch(context.Context, string, uint64) error { return ErrUnknownMember }
func (seedImages) Install(context.Context, uint64) error       { return ErrUnknownMember }

// TestRestoredClusterKeepsItsVersionAndRefusesOldMembers: a cluster seeded
// from an image of a cluster at format version 2, with voters 1 to 3 and
// node 5 removed, starts at version 2 with node 1 alone, and refuses the
// messages of every member it does not list: the old voters 2 and 3 (a
// MsgApp at a higher term included) and the removed node 5.
func TestRestoredClusterKeepsItsVersionAndRefusesOldMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const index, term = 40, 7
		old := newMembership()
		old.Index = index
		old.Voters = []uint64{1, 2, 3}
		old.Learner = []uint64{4}
		for id := uint64(1); id <= 4; id++ {
			old.Members[id] = Member{ID: id, Addr: "old", Role: Follower, MaxVersion: 2}
		}
		old.Removed = []uint64{5}
		old.Version = 2
		blob, err := NewClusterMembership(old.encode(), index, 1, "n1")
		require.NoError(t, err)
		m, err := decodeMembership(blob)
		require.NoError(t, err)
		require.Equal(t, uint32(2), m.clusterVersion(), "the cluster version never goes down")
		require.ElementsMatch(t, []uint64{2, 3, 4, 5}, m.Removed)
		require.Equal(t, []uint64{1}, m.Voters)

		fs := vfs.NewMem()
		require.NoError(t, Seed(SeedConfig{FS: fs, Dir: "/n1", ID: 1, Addr: "n1", ClusterID: "c1", Token: "t",
			Index: index, Term: term, Membership: blob}))
		j, err := Open(t.Context(), Config{
			ID: 1, Dir: "/n1", Addr: "n1", FS: fs, StateMachine: &orderSM{}, Snapshots: seedImages{index, blob},
			TickInterval: testTick, ElectionTicks: testElectionTicks, HeartbeatTicks: 2,
		})
		require.NoError(t, err)
		defer j.Close()
		st := j.Status()
		require.Equal(t, uint32(2), st.ClusterVersion)
		for _, from := range []uint64{2, 3, 4, 5} {
			err := j.receive(t.Context(), []*raftpb.Message{{
				Type: raftpb.MsgApp.Enum(), From: new(from), To: new(uint64(1)), Term: new(uint64(term + 10)),
				Index: new(uint64(index)), LogTerm: new(uint64(term)), Commit: new(uint64(index)),
			}})
			require.ErrorIs(t, err, ErrRemoved, "a message from old member %d", from)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		for !j.Status().IsLeader() {
			ch := j.Leadership()
			if j.Status().IsLeader() {
				break
			}
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatalf("the seeded node does not lead: %+v", j.Status())
			}
		}
		require.NoError(t, j.Close())
	})
}
