package journal

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal/internal/membership"
)

// The checks made on a message alone, case by case (the snapshot ones
// cannot reach a cluster without a Snapshots hook).
func TestCheckMessage(t *testing.T) {
	blob := membership.New().Encode()
	snap := func(cs *raftpb.ConfState, data []byte) *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(uint64(5)),
			Snapshot: &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(4)), ConfState: cs}}}
	}
	msg := func(typ raftpb.MessageType, term uint64, ents ...*raftpb.Entry) *raftpb.Message {
		return &raftpb.Message{Type: typ.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term), Entries: ents}
	}
	app := func(index, logTerm uint64, ents ...*raftpb.Entry) *raftpb.Message {
		m := msg(raftpb.MsgApp, 5, ents...)
		m.Index, m.LogTerm = new(index), new(logTerm)
		return m
	}
	ent := func(index, term uint64) *raftpb.Entry { return &raftpb.Entry{Index: new(index), Term: new(term)} }
	fromSelf := msg(raftpb.MsgHeartbeat, 5)
	fromSelf.From = new(uint64(1))
	cases := []struct {
		name string
		m    *raftpb.Message
		want string // "" = accepted
	}{
		{"good snapshot", snap(&raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}}, blob), ""},
		{"snapshot voter also a learner", snap(&raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{2}}, blob), "twice"},
		{"snapshot without voters", snap(&raftpb.ConfState{Learners: []uint64{1}}, blob), "no voter"},
		{"snapshot joint config", snap(&raftpb.ConfState{Voters: []uint64{1}, VotersOutgoing: []uint64{2}}, blob), "joint"},
		{"snapshot bad data", snap(&raftpb.ConfState{Voters: []uint64{1}}, []byte("x")), "membership"},
		{"vote without term", msg(raftpb.MsgVote, 0), "without a term"},
		{"from itself", fromSelf, "claims to come from node 1"},
		{"local type", msg(raftpb.MsgHup, 0), "local message"},
		{"empty proposal", msg(raftpb.MsgProp, 0), "empty proposal"},
		{"good append", app(7, 3, ent(8, 3), ent(9, 5)), ""},
		{"append with a gap", app(7, 3, ent(9, 3)), "entry 0"},
		{"append with falling terms", app(7, 3, ent(8, 4), ent(9, 3)), "entry 1"},
		{"append from the future", app(7, 3, ent(8, 6)), "entry 0"},
		{"heartbeat", msg(raftpb.MsgHeartbeat, 5), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkMessage(tc.m, 1)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
