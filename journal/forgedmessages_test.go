package journal_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/rafthttp"
	"github.com/metatree/metatree/journal/journaltest"
)

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

// postStream sends one frame of msgs to n's /raft/stream as node from,
// with the cluster's id and token (all a forger needs without
// authentication), and returns the status and body.
func postStream(t *testing.T, c *httpBubble, n *journaltest.Node, from uint64, msgs ...*raftpb.Message) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t, 5*time.Second), http.MethodPost, "http://"+n.Addr+rafthttp.PathStream, bytes.NewReader(frameOf(t, msgs...)))
	require.NoError(t, err)
	req.Header.Set(rafthttp.HeaderCluster, n.Journal().Status().ClusterID)
	req.Header.Set(rafthttp.HeaderToken, "secret")
	req.Header.Set(rafthttp.HeaderFrom, strconv.FormatUint(from, 10))
	req.Header.Set(rafthttp.HeaderTo, strconv.FormatUint(n.ID, 10))
	resp, err := c.Client().Do(req)
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
		c := newHTTPBubble(t, journaltest.Options{})
		L := c.leader(t)
		leader := L.ID
		follower := leader%3 + 1
		F := c.Node(follower)
		ctx := ctxFor(t, 30*time.Second)
		proposeVia(ctx, t, L, "before")
		st := F.Journal().Status()
		term := st.Term
		last, err := F.Journal().LastIndexForTest() // durable: TermAt reads it
		require.NoError(t, err)
		lastTerm, err := F.Journal().TermAt(last)
		require.NoError(t, err)
		user := &raftpb.Entry{Data: envelope.EncodeUser([16]byte{1}, []byte("forged"))}
		cases := []struct {
			name string
			to   *journaltest.Node
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
			before := tc.to.Journal().Status().RefusedMessages
			code, body := postStream(t, c, tc.to, tc.msg.GetFrom(), tc.msg)
			require.Equal(t, http.StatusBadRequest, code, "%s: %s", tc.name, body)
			require.Contains(t, body, tc.want, tc.name)
			require.Equal(t, before+1, tc.to.Journal().Status().RefusedMessages, tc.name)
		}
		for i, n := range []*journaltest.Node{L, F, L, F} {
			proposeVia(ctx, t, n, fmt.Sprintf("after-%d", i))
		}
		for _, n := range c.Nodes() {
			st := n.Journal().Status()
			require.NoError(t, st.Err)
			require.Equal(t, leader, st.Leader)
			require.Equal(t, term, st.Term, "node %d did not adopt a forged term", n.ID)
		}
	})
}

// A stream carries the messages of the node it is from, and the ones raft
// relays for another member: a follower passes on to its leader the
// proposals and read requests it received from members that took it for
// the leader, with their senders' ids. Any other message in another
// node's name is refused with the stream.
func TestStreamCarriesItsNodesMessagesAndTheOnesRaftRelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newHTTPBubble(t, journaltest.Options{})
		L := c.leader(t)
		leader := L.ID
		relay, origin := leader%3+1, (leader+1)%3+1
		ctx := ctxFor(t, 30*time.Second)
		proposeVia(ctx, t, L, "before")
		term := L.Journal().Status().Term

		read := &raftpb.Message{Type: raftpb.MsgReadIndex.Enum(), From: new(origin), To: new(leader),
			Entries: []*raftpb.Entry{{Data: []byte("relayed-read")}}}
		code, body := postStream(t, c, L, relay, read)
		require.Equal(t, http.StatusOK, code, "a read request relayed for node %d: %s", origin, body)
		require.Zero(t, L.Journal().RefusedPeers(), "a relayed message is not refused")

		forged := &raftpb.Message{Type: raftpb.MsgAppResp.Enum(), From: new(origin), To: new(leader), Term: new(term), Index: new(uint64(1))}
		code, body = postStream(t, c, L, relay, forged)
		require.Equal(t, http.StatusBadRequest, code, body)
		require.Contains(t, body, fmt.Sprintf("message from %d (type MsgAppResp) on the stream of node %d", origin, relay))
		reg := prometheus.NewRegistry()
		reg.MustRegister(L.Journal().Collector())
		require.Equal(t, 1.0, scrape(t, reg)["metatree_journal_refused_peer_requests_total"], "the forged stream is counted")

		proposeVia(ctx, t, L, "after")
		require.Equal(t, leader, L.Journal().Status().Leader)
	})
}
