package journal

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal/internal/rafthttp"
)

// HTTPOptions configures the HTTP transport ([NewHTTPTransport]). Zero
// values mean the defaults documented on the matching [Config] fields.
// Its fields:
//   - Client (*http.Client) sends the requests (default: a client of its
//     own, closed with the transport). Set one with a TLS config for
//     https.
//   - Scheme (string) is "http" or "https" (default: "https" with TLS, else
//     "http").
//   - TLS (*tls.Config) is Config.TLS: with it the transport's own client
//     dials with it, and the Handler requires of every peer a member
//     certificate naming the sender.
//   - Logger (*slog.Logger) receives the logs (default: discard).
//   - QueueMsgs (int) and QueueBytes (uint64) bound each peer's send queue
//     (defaults 4096 messages, 64 MiB).
//   - MaxBodyBytes (int64) bounds one stream frame or request body (default
//     5 MiB).
//   - HandshakeTimeout (time.Duration) bounds the wait for a peer to accept
//     a stream (default 3s).
//   - SnapshotTimeout (time.Duration) bounds one snapshot delivery, which
//     includes the receiver fetching the image (default 10 minutes). On
//     expiry raft is told the snapshot failed and tries again later.
//   - Clock ([Clock]) times the reconnect backoff and the handshake
//     (default: the real clock).
//
// The transport (journal/internal/rafthttp) declares the fields, so that
// the options reach it as they are.
type HTTPOptions = rafthttp.Options

// HTTPTransport is the default Transport: raft messages travel over one
// long-lived streaming POST per peer (/raft/stream), written by one sender
// goroutine per peer in length-prefixed batches (pipelined: the sender never
// waits for a reply), snapshots and proposals over their own requests.
// Every request carries the cluster id, the token and the node ids, checked
// by the receiving Handler; bad requests get a 4xx status.
//
// It is the journal's face of journal/internal/rafthttp: the journal that
// opens with it hands it the cluster id and token to stamp and check.
type HTTPTransport struct {
	t  *rafthttp.Transport
	id rafthttp.Identity // set by the journal before Start
}

var _ Transport = (*HTTPTransport)(nil)

// NewHTTPTransport returns an HTTP transport; pass it as Config.Transport
// (Open creates one itself when Config.Transport is nil).
func NewHTTPTransport(opts HTTPOptions) *HTTPTransport {
	return &HTTPTransport{t: rafthttp.New(opts)}
}

// setIdentity gives the transport the cluster id and token it stamps on
// and checks against every peer request. Open calls it before Start.
func (h *HTTPTransport) setIdentity(clusterID func() string, token, addr string) {
	h.id = rafthttp.Identity{ClusterID: clusterID, Token: token, Addr: addr}
}

// Start implements Transport. The journal that opens with the transport
// has handed it the cluster's identity (setIdentity); one that opens with
// a Transport of the host's wrapping it could not, and the journal's
// Receiver, passed on by the wrapper, carries it instead.
func (h *HTTPTransport) Start(local uint64, r Receiver) error {
	id := h.id
	if rv, ok := r.(receiver); ok && id.ClusterID == nil {
		id = rafthttp.Identity{ClusterID: rv.j.cluster, Token: rv.j.token, Addr: rv.j.cfg.Addr}
	}
	h.t.Start(local, httpNode{r}, id)
	return nil
}

// SetPeer implements Transport.
func (h *HTTPTransport) SetPeer(id uint64, addr string) { h.t.SetPeer(id, addr) }

// RemovePeer implements Transport. The peer's sender still delivers what
// is already queued (the append that tells a removed node its removal
// committed), for at most HandshakeTimeout, and then stops.
func (h *HTTPTransport) RemovePeer(id uint64) { h.t.RemovePeer(id) }

// Send implements Transport.
func (h *HTTPTransport) Send(msgs []*raftpb.Message) { h.t.Send(msgs) }

// Forward implements Transport.
func (h *HTTPTransport) Forward(ctx context.Context, to uint64, fr *ForwardRequest) (*ForwardResponse, error) {
	var out ForwardResponse
	p := rafthttp.Proposal{Kind: uint8(fr.Kind), Force: fr.Force, Key: fr.Key, Data: fr.Data}
	if err := h.t.Forward(ctx, to, p, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Join implements Transport.
func (h *HTTPTransport) Join(ctx context.Context, helper string, jr *JoinRequest) (*JoinResponse, error) {
	var out JoinResponse
	if err := h.t.Join(ctx, helper, jr.Token, jr, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Close implements Transport.
func (h *HTTPTransport) Close() error { return h.t.Close() }

// Handler serves the transport's endpoints (all under /raft/). It may be
// mounted before the Journal using the transport is open (it answers 503
// until then), which spares a joining node's peers a retry.
func (h *HTTPTransport) Handler() http.Handler { return h.t.Handler() }

// RefusedPeers returns how many peer requests the Handler refused for the
// sender's identity: a certificate that did not name it (or, with TLS,
// none), or a stream carrying a message in another member's name that
// raft does not relay.
func (h *HTTPTransport) RefusedPeers() uint64 { return h.t.RefusedPeers() }

// RefusedPeers returns the HTTP transport's count of peer requests refused
// for their identity (0 with another transport).
func (j *Journal) RefusedPeers() uint64 {
	if j.http == nil {
		return 0
	}
	return j.http.RefusedPeers()
}

// httpNode delivers the HTTP transport's inbound traffic to a Receiver,
// translating the transport's wire forms into the journal's types.
type httpNode struct{ r Receiver }

func (n httpNode) Receive(ctx context.Context, msgs []*raftpb.Message) error {
	return n.r.Receive(ctx, msgs)
}

func (n httpNode) HandleForward(ctx context.Context, p rafthttp.Proposal) (any, error) {
	return n.r.HandleForward(ctx, &ForwardRequest{Kind: ForwardKind(p.Kind), Force: p.Force, Key: p.Key, Data: p.Data})
}

func (n httpNode) DecodeJoin(r io.Reader) (any, uint64, error) {
	var jr JoinRequest
	if err := json.NewDecoder(r).Decode(&jr); err != nil {
		return nil, 0, err
	}
	return &jr, jr.ID, nil
}

func (n httpNode) HandleJoin(ctx context.Context, req any, token string) (any, error) {
	jr := req.(*JoinRequest) // DecodeJoin's
	jr.Token = token
	return n.r.HandleJoin(ctx, jr)
}

// LearnPeer implements rafthttp.PeerLearner (learnpeer.go).
func (n httpNode) LearnPeer(id uint64, addr string) {
	if rv, ok := n.r.(receiver); ok {
		rv.j.learnPeer(id, addr)
	}
}

func (n httpNode) ReportUnreachable(id uint64)       { n.r.ReportUnreachable(id) }
func (n httpNode) ReportRemoved(id uint64)           { n.r.ReportRemoved(id) }
func (n httpNode) ReportSnapshot(id uint64, ok bool) { n.r.ReportSnapshot(id, ok) }
