package rafthttp

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/journal/internal/errs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stubIdentity is the identity of the stub cluster the tests serve.
var stubIdentity = Identity{ClusterID: func() string { return "cluster-a" }, Token: "tok"}

// stubNode accepts everything; it stands in for a Journal behind the
// handler.
type stubNode struct{ got [][]*raftpb.Message }

// stubJoin is a join request as the stub decodes it: a role other than
// follower or observer is malformed, as the journal's is.
type stubJoin struct {
	ID   uint64 `json:"id"`
	Role string `json:"role"`
}

func (s *stubNode) Receive(_ context.Context, msgs []*raftpb.Message) error {
	s.got = append(s.got, msgs)
	return nil
}
func (s *stubNode) HandleForward(context.Context, Proposal) (any, error) {
	return map[string]uint64{"Index": 7}, nil
}
func (s *stubNode) DecodeJoin(r io.Reader) (any, uint64, error) {
	var jr stubJoin
	if err := json.NewDecoder(r).Decode(&jr); err != nil {
		return nil, 0, err
	}
	if jr.Role != "follower" && jr.Role != "observer" {
		return nil, 0, fmt.Errorf("unknown role %q", jr.Role)
	}
	return &jr, jr.ID, nil
}
func (s *stubNode) HandleJoin(context.Context, any, string) (any, error) {
	return map[string]string{"cluster_id": "cluster-a"}, nil
}
func (s *stubNode) ReportUnreachable(uint64)    {}
func (s *stubNode) ReportSnapshot(uint64, bool) {}
func (s *stubNode) ReportRemoved(uint64)        {}

func frameOf(t testing.TB, msgs ...*raftpb.Message) []byte {
	var enc [][]byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		enc = append(enc, b)
	}
	return AppendFrame(nil, enc)
}

func heartbeat(from, to uint64) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(from), To: new(to), Term: new(uint64(3))}
}

func newStubTransport(t testing.TB, maxBody int64) (*Transport, *stubNode) {
	tr := New(Options{MaxBodyBytes: maxBody})
	r := &stubNode{}
	tr.Start(1, r, stubIdentity)
	t.Cleanup(func() { _ = tr.Close() })
	return tr, r
}

func serve(tr *Transport, method, path string, body []byte, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set(HeaderCluster, "cluster-a")
	req.Header.Set(HeaderToken, "tok")
	req.Header.Set(HeaderFrom, "2")
	req.Header.Set(HeaderTo, "1")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	tr.Handler().ServeHTTP(w, req)
	return w
}

func TestHandlerRejectsBadRequests(t *testing.T) {
	tr, recv := newStubTransport(t, 1024)
	good := frameOf(t, heartbeat(2, 1), heartbeat(2, 1))
	huge := binary.BigEndian.AppendUint32(nil, 1<<30)
	cases := []struct {
		name   string
		method string
		path   string
		body   []byte
		hdr    map[string]string
		status int
	}{
		{"stream ok", "POST", PathStream, good, nil, http.StatusOK},
		{"empty stream", "POST", PathStream, nil, nil, http.StatusNoContent},
		{"garbage", "POST", PathStream, []byte("\x00\x00\x00\x05hello"), nil, http.StatusBadRequest},
		{"truncated frame", "POST", PathStream, good[:len(good)-3], nil, http.StatusBadRequest},
		{"truncated header", "POST", PathStream, good[:2], nil, http.StatusBadRequest},
		{"oversized frame", "POST", PathStream, huge, nil, http.StatusRequestEntityTooLarge},
		{"message from another node", "POST", PathStream, frameOf(t, heartbeat(3, 1)), nil, http.StatusBadRequest},
		{"wrong cluster", "POST", PathStream, good, map[string]string{HeaderCluster: "cluster-b"}, http.StatusForbidden},
		{"wrong token", "POST", PathStream, good, map[string]string{HeaderToken: "x"}, http.StatusForbidden},
		{"wrong target", "POST", PathStream, good, map[string]string{HeaderTo: "9"}, http.StatusForbidden},
		{"no sender", "POST", PathStream, good, map[string]string{HeaderFrom: ""}, http.StatusBadRequest},
		{"GET", "GET", PathStream, nil, nil, http.StatusMethodNotAllowed},
		{"short proposal", "POST", PathPropose, []byte{1, 0, 3}, nil, http.StatusBadRequest},
		{"oversized proposal", "POST", PathPropose, make([]byte, 4096), nil, http.StatusRequestEntityTooLarge},
		{"proposal ok", "POST", PathPropose, make([]byte, 30), nil, http.StatusOK},
		{"join garbage", "POST", PathJoin, []byte("{"), nil, http.StatusBadRequest},
		{"join wrong token", "POST", PathJoin, []byte(`{"id":5,"addr":"x","role":"observer"}`), map[string]string{HeaderToken: "x"}, http.StatusForbidden},
		{"join bad role", "POST", PathJoin, []byte(`{"id":5,"addr":"x","role":"king"}`), nil, http.StatusBadRequest},
		{"snapshot garbage", "POST", PathSnapshot, []byte("\x00\x00\x00\x03zzz"), nil, http.StatusBadRequest},
		{"snapshot not a snapshot", "POST", PathSnapshot, good, nil, http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := serve(tr, tc.method, tc.path, tc.body, tc.hdr)
			require.Equal(t, tc.status, w.Code, "body: %s", w.Body.String())
		})
	}
	require.Len(t, recv.got, 1, "only the good stream reached the receiver")
	require.Len(t, recv.got[0], 2)
}

func TestWireErrorsKeepTheirSentinel(t *testing.T) {
	for _, c := range errorCodes {
		w := httptest.NewRecorder()
		WriteError(w, c.err)
		err := decodeErrorResponse(w.Result())
		require.ErrorIs(t, err, c.err, c.code)
	}
}

// FuzzDecodeFrame feeds arbitrary bytes to the stream frame decoder: it
// must return messages or an error, never panic, and what it accepts must
// survive a re-encode.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(frameOf(f, heartbeat(2, 1)))
	f.Add(frameOf(f, &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(uint64(2)), To: new(uint64(1)),
		Entries: []*raftpb.Entry{{Index: new(uint64(5)), Term: new(uint64(2)), Data: []byte("x")}}}))
	f.Add([]byte{0, 0, 0, 2, 1, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, _, err := readFrame(bytes.NewReader(data), 1<<16, nil)
		if err != nil {
			return
		}
		var enc [][]byte
		for _, m := range msgs {
			require.NotNil(t, m.Type)
			b, err := proto.Marshal(m)
			require.NoError(t, err)
			enc = append(enc, b)
		}
		again, _, err := readFrame(bytes.NewReader(AppendFrame(nil, enc)), 1<<20, nil)
		require.NoError(t, err)
		require.Len(t, again, len(msgs))
	})
}

// FuzzStreamEnd feeds arbitrary answers to the reader of a stream's end:
// it always returns an error (a stream never ends cleanly), never panics,
// and the error of a well-formed wire error wraps the sentinel its code
// names, as the serving side wrote it.
func FuzzStreamEnd(f *testing.F) {
	for _, err := range []error{errs.ErrRemoved, errs.ErrMalformed, errors.New("other")} {
		_, we := wireErrorOf(err)
		b, _ := json.Marshal(we)
		f.Add(b)
	}
	f.Add([]byte(`{"code":"removed"`))
	f.Add([]byte(`error: text`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		err := streamEnd(bytes.NewReader(data))
		require.Error(t, err)
		var we wireError
		if len(data) > 64<<10 || json.Unmarshal(data, &we) != nil {
			return
		}
		for _, c := range errorCodes {
			if c.code == we.Code {
				require.ErrorIs(t, err, c.err, "code %q", we.Code)
			}
		}
	})
}

// FuzzHandler sends arbitrary bodies to every endpoint: the answer is a
// status, never a panic or a 5xx.
func FuzzHandler(f *testing.F) {
	f.Add(uint8(0), frameOf(f, heartbeat(2, 1)))
	f.Add(uint8(1), []byte("garbage"))
	f.Add(uint8(2), []byte{1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 'x'})
	f.Add(uint8(3), []byte(`{"id":1}`))
	paths := []string{PathStream, PathSnapshot, PathPropose, PathJoin}
	tr, _ := newStubTransport(f, 1<<16)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		w := serve(tr, "POST", paths[int(which)%len(paths)], body, nil)
		require.Less(t, w.Code, 500, "body %q: %s", body, w.Body.String())
	})
}

// chanNode hands each received message's type to a channel.
type chanNode struct {
	stubNode
	msgs chan raftpb.MessageType
}

func (r *chanNode) Receive(_ context.Context, msgs []*raftpb.Message) error {
	for _, m := range msgs {
		r.msgs <- m.GetType()
	}
	return nil
}

// RemovePeer lets the sender deliver what was queued before it (the append
// that tells a removed node of its removal), then stops it; a removed peer
// that takes nothing is cut off after HandshakeTimeout, and Close waits.
func TestRemovePeerDeliversWhatWasQueued(t *testing.T) {
	recv := New(Options{})
	r := &chanNode{msgs: make(chan raftpb.MessageType, 1000)}
	recv.Start(2, r, stubIdentity)
	srv := httptest.NewServer(recv.Handler())
	defer srv.Close()
	defer recv.Close()

	send := New(Options{HandshakeTimeout: 200 * time.Millisecond})
	stopped := make(chan struct{}, 1)
	onStop := func() {
		select {
		case stopped <- struct{}{}:
		default:
		}
	}
	send.senderStopped.Store(&onStop)
	// drained waits until no removed peer's sender runs, looking again at
	// each sender that stops.
	drained := func(what string) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			send.mu.Lock()
			n := len(send.draining)
			send.mu.Unlock()
			if n == 0 {
				return
			}
			select {
			case <-stopped:
			case <-deadline:
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	send.Start(1, &stubNode{}, stubIdentity)
	send.SetPeer(2, strings.TrimPrefix(srv.URL, "http://"))
	const n = 500
	for range n {
		send.Send([]*raftpb.Message{heartbeat(1, 2)})
	}
	send.RemovePeer(2)
	for i := range n {
		select {
		case typ := <-r.msgs:
			require.Equal(t, raftpb.MsgHeartbeat, typ)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d queued messages delivered after RemovePeer", i, n)
		}
	}
	drained("the removed peer's sender stopped")

	// A removed peer that accepts the stream but never reads it.
	stuck := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-stuck
	}))
	defer hung.Close()
	defer close(stuck)
	send.SetPeer(3, strings.TrimPrefix(hung.URL, "http://"))
	big := &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(3)), Term: new(uint64(3)),
		Entries: []*raftpb.Entry{{Data: make([]byte, 1<<20)}}}
	for range 32 { // more than the socket buffers hold
		send.Send([]*raftpb.Message{big})
	}
	send.RemovePeer(3)
	drained("the stuck removed peer's sender cut off")
	require.NoError(t, send.Close())
}

// removedNode refuses every batch after the first accept ones as a
// removed sender's, and hands each ReportRemoved to a channel.
type removedNode struct {
	stubNode
	accept  int
	got     chan struct{}
	removed chan uint64
}

func (r *removedNode) Receive(_ context.Context, msgs []*raftpb.Message) error {
	if r.accept == 0 {
		return fmt.Errorf("%w: node %d", errs.ErrRemoved, msgs[0].GetFrom())
	}
	r.accept--
	r.got <- struct{}{}
	return nil
}

func (r *removedNode) ReportRemoved(id uint64) { r.removed <- id }

// A peer that refuses this node's messages as a removed node's, on the
// stream's first frame (410 removed) or later in it (the wire error that
// ends the stream), is reported through ReportRemoved: that is how a node
// removed while it lagged learns of its removal.
func TestRefusalAsRemovedIsReported(t *testing.T) {
	for _, accept := range []int{0, 1} {
		t.Run(fmt.Sprintf("after=%d", accept), func(t *testing.T) {
			recv := New(Options{})
			peer := &removedNode{accept: accept, got: make(chan struct{}, 1)}
			recv.Start(2, peer, stubIdentity)
			srv := httptest.NewServer(recv.Handler())
			defer srv.Close()
			defer recv.Close()

			send := New(Options{})
			local := &removedNode{removed: make(chan uint64, 10)}
			send.Start(1, local, stubIdentity)
			defer send.Close()
			send.SetPeer(2, strings.TrimPrefix(srv.URL, "http://"))
			for range accept {
				send.Send([]*raftpb.Message{heartbeat(1, 2)})
				select {
				case <-peer.got:
				case <-time.After(5 * time.Second):
					t.Fatal("the peer never received the accepted batch")
				}
			}
			send.Send([]*raftpb.Message{heartbeat(1, 2)})
			select {
			case id := <-local.removed:
				require.Equal(t, uint64(2), id, "the refusing peer is named")
			case <-time.After(5 * time.Second):
				t.Fatal("the refusal as removed was not reported")
			}
		})
	}
}
