package rafthttp

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal/internal/errs"
)

// The serving side of the HTTP transport: the handler, the peer and
// cluster checks every request passes, and one handler a path.

// Handler serves the transport's endpoints (all under /raft/). It may be
// mounted before the Journal using the transport is open (it answers 503
// until then), which spares a joining node's peers a retry.
func (t *Transport) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathStream, t.serveStream)
	mux.HandleFunc("POST "+PathSnapshot, t.serveSnapshot)
	mux.HandleFunc("POST "+PathPropose, t.servePropose)
	mux.HandleFunc("POST "+PathJoin, t.serveJoin)
	return mux
}

// checkPeer validates the identity headers of a peer request and returns
// the sender's id.
func (t *Transport) checkPeer(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	if !t.started.Load() || t.ctx.Err() != nil {
		WriteError(w, errs.ErrClosed)
		return 0, false
	}
	if !t.checkAuth(w, r, true) {
		return 0, false
	}
	from, err := strconv.ParseUint(r.Header.Get(HeaderFrom), 10, 64)
	if err != nil || from == 0 {
		WriteError(w, fmt.Errorf("%w: bad %s header", errs.ErrMalformed, HeaderFrom))
		return 0, false
	}
	if !t.checkIdentity(w, r, from) {
		return 0, false
	}
	if to, err := strconv.ParseUint(r.Header.Get(HeaderTo), 10, 64); err != nil || to != t.local {
		WriteError(w, fmt.Errorf("%w: request for node %q reached node %d", errs.ErrClusterMismatch, r.Header.Get(HeaderTo), t.local))
		return 0, false
	}
	if t.dropped(from, t.local) {
		WriteError(w, fmt.Errorf("%w: partitioned (test)", errs.ErrUnreachable))
		return 0, false
	}
	t.learn(from, r.Header.Get(HeaderAddr))
	return from, true
}

// learn hands the Node the address a request from a peer without a
// sender here gives (PeerLearner): the local node cannot answer it
// otherwise.
func (t *Transport) learn(from uint64, addr string) {
	if addr == "" || t.peer(from) != nil {
		return
	}
	if l, ok := t.recv.(PeerLearner); ok {
		l.LearnPeer(from, addr)
	}
}

func (t *Transport) checkAuth(w http.ResponseWriter, r *http.Request, needCluster bool) bool {
	if needCluster && r.Header.Get(HeaderCluster) != t.id.ClusterID() {
		WriteError(w, fmt.Errorf("%w: cluster id %q, this node is in %q", errs.ErrClusterMismatch, r.Header.Get(HeaderCluster), t.id.ClusterID()))
		return false
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(HeaderToken)), []byte(t.id.Token)) != 1 {
		WriteError(w, fmt.Errorf("%w: bad token", errs.ErrClusterMismatch))
		return false
	}
	return true
}

func (t *Transport) serveStream(w http.ResponseWriter, r *http.Request) {
	// Full duplex: an early answer (a refusal) must not wait for the
	// server to drain a body that never ends.
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	// The connection is not reusable after a stream that ended early: the
	// peer may still be writing its body.
	w.Header().Set("Connection", "close")
	from, ok := t.checkPeer(w, r)
	if !ok {
		return
	}
	// End the stream when this transport closes: a read deadline in the
	// past unblocks the body read.
	stop := context.AfterFunc(t.ctx, func() { _ = rc.SetReadDeadline(aLongTimeAgo) })
	defer stop()
	// The first frame decides the answer: a bad one gets a 4xx; a good one
	// gets 200 at once (the sender waits for it before it trusts the
	// stream). Errors after that end the stream (logged; the sender
	// reconnects).
	accepted := false
	fail := func(err error) {
		if !accepted {
			WriteError(w, err)
			return
		}
		t.log.Warn("stream from peer ended", "from", from, "err", err)
		_, we := wireErrorOf(err)
		_ = json.NewEncoder(w).Encode(we) // the sender reads it as the stream's end
	}
	var scratch []byte
	for {
		var msgs []*raftpb.Message
		var err error
		msgs, scratch, err = readFrame(r.Body, t.opts.MaxBodyBytes, scratch)
		if err != nil {
			switch {
			case errors.Is(err, io.EOF) || t.ctx.Err() != nil || r.Context().Err() != nil:
				if !accepted {
					w.WriteHeader(http.StatusNoContent)
				}
			default:
				fail(err)
			}
			return
		}
		if t.dropped(from, t.local) {
			continue
		}
		for _, m := range msgs {
			if (m.GetFrom() != from && !relayed(m)) || m.GetType() == raftpb.MsgSnap {
				if m.GetFrom() != from {
					t.refused.Add(1) // a message in another member's name
				}
				fail(fmt.Errorf("%w: message from %d (type %v) on the stream of node %d", errs.ErrMalformed, m.GetFrom(), m.GetType(), from))
				return
			}
		}
		if err := t.recv.Receive(r.Context(), msgs); err != nil {
			fail(err)
			return
		}
		if !accepted {
			accepted = true
			w.WriteHeader(http.StatusOK)
			_ = rc.Flush()
		}
	}
}

func (t *Transport) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	from, ok := t.checkPeer(w, r)
	if !ok {
		return
	}
	msgs, _, err := readFrame(http.MaxBytesReader(w, r.Body, t.opts.MaxBodyBytes+4), t.opts.MaxBodyBytes, nil)
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("%w: empty snapshot request", errs.ErrMalformed)
	}
	if err != nil {
		WriteError(w, err)
		return
	}
	if len(msgs) != 1 || msgs[0].GetType() != raftpb.MsgSnap || msgs[0].GetFrom() != from {
		WriteError(w, fmt.Errorf("%w: snapshot request must carry one MsgSnap from the sender", errs.ErrMalformed))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer context.AfterFunc(t.ctx, cancel)()
	defer cancel()
	if err := t.recv.Receive(ctx, msgs); err != nil {
		WriteError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (t *Transport) servePropose(w http.ResponseWriter, r *http.Request) {
	if _, ok := t.checkPeer(w, r); !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, t.opts.MaxBodyBytes))
	if err != nil {
		WriteError(w, fmt.Errorf("%w: %w", errTooLarge, err))
		return
	}
	if len(body) < 18 {
		WriteError(w, fmt.Errorf("%w: proposal of %d bytes", errs.ErrMalformed, len(body)))
		return
	}
	fr := Proposal{Kind: body[0], Force: body[1] == 1, Data: body[18:]}
	copy(fr.Key[:], body[2:18])
	ctx, cancel := context.WithCancel(r.Context())
	defer context.AfterFunc(t.ctx, cancel)()
	defer cancel()
	resp, err := t.recv.HandleForward(ctx, fr)
	if err != nil {
		WriteError(w, err)
		return
	}
	writeJSON(w, resp)
}

func (t *Transport) serveJoin(w http.ResponseWriter, r *http.Request) {
	if !t.started.Load() || t.ctx.Err() != nil {
		WriteError(w, errs.ErrClosed)
		return
	}
	if !t.checkAuth(w, r, false) {
		return
	}
	jr, claimed, err := t.recv.DecodeJoin(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		WriteError(w, fmt.Errorf("%w: join request: %w", errs.ErrMalformed, err))
		return
	}
	if !t.checkIdentity(w, r, claimed) {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer context.AfterFunc(t.ctx, cancel)()
	defer cancel()
	resp, err := t.recv.HandleJoin(ctx, jr, r.Header.Get(HeaderToken))
	if err != nil {
		WriteError(w, err)
		return
	}
	writeJSON(w, resp)
}

// aLongTimeAgo is a read deadline in the past: the read it is set on fails
// at once (net/http stops its own reads the same way).
var aLongTimeAgo = time.Unix(1, 0)

// relayed reports whether m is of a type raft relays in its sender's name:
// a follower passes on to its leader the proposals and read requests it
// received from members that took it for the leader, so they reach the
// leader on the follower's stream with another member's id. Any other
// message on a stream is the stream's node's own.
func relayed(m *raftpb.Message) bool {
	t := m.GetType()
	return m.GetFrom() != 0 && (t == raftpb.MsgProp || t == raftpb.MsgReadIndex)
}
