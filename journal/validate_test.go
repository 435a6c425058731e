package journal

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/rafthttp"
)

// postStream sends one frame of msgs to n's /raft/stream as node from,
// with the cluster's id and token (all a forger needs without
// authentication), and returns the status and body.
func postStream(t *testing.T, n *node, from uint64, msgs ...*raftpb.Message) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 5*time.Second), http.MethodPost, "http://"+n.addr+rafthttp.PathStream, bytes.NewReader(frameOf(t, msgs...)))
	require.NoError(t, err)
	req.Header.Set(rafthttp.HeaderCluster, n.j.Status().ClusterID)
	req.Header.Set(rafthttp.HeaderToken, "secret")
	req.Header.Set(rafthttp.HeaderFrom, strconv.FormatUint(from, 10))
	req.Header.Set(rafthttp.HeaderTo, strconv.FormatUint(n.id, 10))
	resp, err := n.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// No message from the network crashes a node: the ones raft v3.7.0 panics
// on are refused with a clear error (400 on the stream), counted, and never
// stepped (the forged term is not adopted either). The nodes keep leading
// and following as before.
func TestForgedMessagesCannotCrashANode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		c.start(3, 0)
		leader := c.waitLeader()
		follower := leader%3 + 1
		propose(t, c.nodes[leader], "before")
		L, F := c.nodes[leader], c.nodes[follower]
		st := F.j.Status()
		term := st.Term
		last, err := F.j.store.LastIndex() // durable: TermAt reads it
		require.NoError(t, err)
		lastTerm, err := F.j.TermAt(last)
		require.NoError(t, err)
		user := &raftpb.Entry{Data: envelope.EncodeUser([16]byte{1}, []byte("forged"))}
		cases := []struct {
			name string
			to   *node
			msg  *raftpb.Message
			want string
		}{
			{"heartbeat committing beyond the log", F,
				&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(leader), To: new(follower), Term: new(term + 1), Commit: new(uint64(1 << 40))},
				"beyond this log's last index"},
			{"append rewriting a committed entry", F,
				&raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(leader), To: new(follower), Term: new(term + 1),
					Index: new(last), LogTerm: new(lastTerm),
					Entries: []*raftpb.Entry{{Index: new(st.Committed), Term: new(term + 1)}}},
				"entry 0 is"},
			{"proposal carrying a term", F,
				&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(leader), To: new(follower), Term: new(term), Entries: []*raftpb.Entry{user}},
				"carries term"},
			{"read index without its entry", L,
				&raftpb.Message{Type: raftpb.MsgReadIndex.Enum(), From: new(follower), To: new(leader)},
				"with 0 entries"},
			{"acknowledgement beyond the log", L,
				&raftpb.Message{Type: raftpb.MsgAppResp.Enum(), From: new(follower), To: new(leader), Term: new(term), Index: new(uint64(1 << 40))},
				"beyond this log's last index"},
		}
		for _, tc := range cases {
			// One cluster takes every case, in a bubble, where t.Run
			// cannot start subtests: each assertion names its case.
			before := tc.to.j.Status().RefusedMessages
			code, body := postStream(t, tc.to, tc.msg.GetFrom(), tc.msg)
			require.Equal(t, http.StatusBadRequest, code, "%s: %s", tc.name, body)
			require.Contains(t, body, tc.want, tc.name)
			require.Equal(t, before+1, tc.to.j.Status().RefusedMessages, tc.name)
		}
		for i, n := range []*node{L, F, L, F} {
			propose(t, n, fmt.Sprintf("after-%d", i))
		}
		for _, n := range c.nodes {
			st := n.j.Status()
			require.NoError(t, st.Err)
			require.Equal(t, leader, st.Leader)
			require.Equal(t, term, st.Term, "node %d did not adopt a forged term", n.id)
		}
	})
}

// The checks made on a message alone, case by case (the snapshot ones
// cannot reach a cluster without a Snapshots hook).
func TestCheckMessage(t *testing.T) {
	blob := newMembership().encode()
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

// frameOf is the stream frame of msgs.
func frameOf(t testing.TB, msgs ...*raftpb.Message) []byte {
	var enc [][]byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		enc = append(enc, b)
	}
	return rafthttp.AppendFrame(nil, enc)
}
