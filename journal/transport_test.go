package journal

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// stubReceiver accepts everything; it stands in for a Journal behind the
// handler.
type stubReceiver struct{ got [][]*raftpb.Message }

func (s *stubReceiver) identity() (string, string) { return "cluster-a", "tok" }
func (s *stubReceiver) Receive(_ context.Context, msgs []*raftpb.Message) error {
	s.got = append(s.got, msgs)
	return nil
}
func (s *stubReceiver) HandleForward(context.Context, *ForwardRequest) (*ForwardResponse, error) {
	return &ForwardResponse{Index: 7}, nil
}
func (s *stubReceiver) HandleJoin(context.Context, *JoinRequest) (*JoinResponse, error) {
	return &JoinResponse{ClusterID: "cluster-a"}, nil
}
func (s *stubReceiver) ReportUnreachable(uint64)    {}
func (s *stubReceiver) ReportSnapshot(uint64, bool) {}
func (s *stubReceiver) ReportRemoved(uint64)        {}

func frameOf(t testing.TB, msgs ...*raftpb.Message) []byte {
	var enc [][]byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		enc = append(enc, b)
	}
	return appendFrame(nil, enc)
}

func heartbeat(from, to uint64) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(from), To: new(to), Term: new(uint64(3))}
}

func newStubTransport(t testing.TB, maxBody int64) (*HTTPTransport, *stubReceiver) {
	tr := NewHTTPTransport(HTTPOptions{MaxBodyBytes: maxBody})
	r := &stubReceiver{}
	require.NoError(t, tr.Start(1, r))
	t.Cleanup(func() { _ = tr.Close() })
	return tr, r
}

func serve(tr *HTTPTransport, method, path string, body []byte, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set(hdrCluster, "cluster-a")
	req.Header.Set(hdrToken, "tok")
	req.Header.Set(hdrFrom, "2")
	req.Header.Set(hdrTo, "1")
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
		{"stream ok", "POST", pathStream, good, nil, http.StatusOK},
		{"empty stream", "POST", pathStream, nil, nil, http.StatusNoContent},
		{"garbage", "POST", pathStream, []byte("\x00\x00\x00\x05hello"), nil, http.StatusBadRequest},
		{"truncated frame", "POST", pathStream, good[:len(good)-3], nil, http.StatusBadRequest},
		{"truncated header", "POST", pathStream, good[:2], nil, http.StatusBadRequest},
		{"oversized frame", "POST", pathStream, huge, nil, http.StatusRequestEntityTooLarge},
		{"message from another node", "POST", pathStream, frameOf(t, heartbeat(3, 1)), nil, http.StatusBadRequest},
		{"wrong cluster", "POST", pathStream, good, map[string]string{hdrCluster: "cluster-b"}, http.StatusForbidden},
		{"wrong token", "POST", pathStream, good, map[string]string{hdrToken: "x"}, http.StatusForbidden},
		{"wrong target", "POST", pathStream, good, map[string]string{hdrTo: "9"}, http.StatusForbidden},
		{"no sender", "POST", pathStream, good, map[string]string{hdrFrom: ""}, http.StatusBadRequest},
		{"GET", "GET", pathStream, nil, nil, http.StatusMethodNotAllowed},
		{"short proposal", "POST", pathPropose, []byte{1, 0, 3}, nil, http.StatusBadRequest},
		{"oversized proposal", "POST", pathPropose, make([]byte, 4096), nil, http.StatusRequestEntityTooLarge},
		{"proposal ok", "POST", pathPropose, make([]byte, 30), nil, http.StatusOK},
		{"join garbage", "POST", pathJoin, []byte("{"), nil, http.StatusBadRequest},
		{"join wrong token", "POST", pathJoin, []byte(`{"id":5,"addr":"x","role":"observer"}`), map[string]string{hdrToken: "x"}, http.StatusForbidden},
		{"join bad role", "POST", pathJoin, []byte(`{"id":5,"addr":"x","role":"king"}`), nil, http.StatusBadRequest},
		{"snapshot garbage", "POST", pathSnapshot, []byte("\x00\x00\x00\x03zzz"), nil, http.StatusBadRequest},
		{"snapshot not a snapshot", "POST", pathSnapshot, good, nil, http.StatusBadRequest},
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
		writeError(w, c.err)
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
		again, _, err := readFrame(bytes.NewReader(appendFrame(nil, enc)), 1<<20, nil)
		require.NoError(t, err)
		require.Len(t, again, len(msgs))
	})
}

// FuzzStreamEnd feeds arbitrary answers to the reader of a stream's end:
// it always returns an error (a stream never ends cleanly), never panics,
// and the error of a well-formed wire error wraps the sentinel its code
// names, as the serving side wrote it.
func FuzzStreamEnd(f *testing.F) {
	for _, err := range []error{ErrRemoved, ErrMalformed, errors.New("other")} {
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
	paths := []string{pathStream, pathSnapshot, pathPropose, pathJoin}
	tr, _ := newStubTransport(f, 1<<16)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		w := serve(tr, "POST", paths[int(which)%len(paths)], body, nil)
		require.Less(t, w.Code, 500, "body %q: %s", body, w.Body.String())
	})
}

// chanReceiver hands each received message's type to a channel.
type chanReceiver struct {
	stubReceiver
	msgs chan raftpb.MessageType
}

func (r *chanReceiver) Receive(_ context.Context, msgs []*raftpb.Message) error {
	for _, m := range msgs {
		r.msgs <- m.GetType()
	}
	return nil
}

// RemovePeer lets the sender deliver what was queued before it (the append
// that tells a removed node of its removal), then stops it; a removed peer
// that takes nothing is cut off after HandshakeTimeout, and Close waits.
func TestRemovePeerDeliversWhatWasQueued(t *testing.T) {
	recv := NewHTTPTransport(HTTPOptions{})
	r := &chanReceiver{msgs: make(chan raftpb.MessageType, 1000)}
	require.NoError(t, recv.Start(2, r))
	srv := httptest.NewServer(recv.Handler())
	defer srv.Close()
	defer recv.Close()

	send := NewHTTPTransport(HTTPOptions{HandshakeTimeout: 200 * time.Millisecond})
	stopped := make(chan struct{}, 1)
	onStop := func() {
		select {
		case stopped <- struct{}{}:
		default:
		}
	}
	send.senderStopped.Store(&onStop)
	require.NoError(t, send.Start(1, &stubReceiver{}))
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
	await(t, 5*time.Second, "the removed peer's sender stopped", stopped, func() bool {
		send.mu.Lock()
		defer send.mu.Unlock()
		return len(send.draining) == 0
	})

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
	await(t, 5*time.Second, "the stuck removed peer's sender cut off", stopped, func() bool {
		send.mu.Lock()
		defer send.mu.Unlock()
		return len(send.draining) == 0
	})
	require.NoError(t, send.Close())
}

// removedReceiver refuses every batch after the first accept ones as a
// removed sender's, and hands each ReportRemoved to a channel.
type removedReceiver struct {
	stubReceiver
	accept  int
	got     chan struct{}
	removed chan uint64
}

func (r *removedReceiver) Receive(_ context.Context, msgs []*raftpb.Message) error {
	if r.accept == 0 {
		return fmt.Errorf("%w: node %d", ErrRemoved, msgs[0].GetFrom())
	}
	r.accept--
	r.got <- struct{}{}
	return nil
}

func (r *removedReceiver) ReportRemoved(id uint64) { r.removed <- id }

// A peer that refuses this node's messages as a removed node's, on the
// stream's first frame (410 removed) or later in it (the wire error that
// ends the stream), is reported through ReportRemoved: that is how a node
// removed while it lagged learns of its removal.
func TestRefusalAsRemovedIsReported(t *testing.T) {
	for _, accept := range []int{0, 1} {
		t.Run(fmt.Sprintf("after=%d", accept), func(t *testing.T) {
			recv := NewHTTPTransport(HTTPOptions{})
			peer := &removedReceiver{accept: accept, got: make(chan struct{}, 1)}
			require.NoError(t, recv.Start(2, peer))
			srv := httptest.NewServer(recv.Handler())
			defer srv.Close()
			defer recv.Close()

			send := NewHTTPTransport(HTTPOptions{})
			local := &removedReceiver{removed: make(chan uint64, 10)}
			require.NoError(t, send.Start(1, local))
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
