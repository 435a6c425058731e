package journal

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// HTTPOptions configures the HTTP transport. Zero values mean the defaults
// documented on the matching Config fields.
type HTTPOptions struct {
	// Client sends the requests (default: a client of its own, closed with
	// the transport). Set one with a TLS config for https.
	Client *http.Client
	// Scheme is "http" (default) or "https".
	Scheme string
	// Logger (default: discard).
	Logger *slog.Logger
	// QueueMsgs and QueueBytes bound each peer's send queue (defaults 4096
	// messages, 64 MiB).
	QueueMsgs  int
	QueueBytes uint64
	// MaxBodyBytes bounds one stream frame or request body (default 5 MiB).
	MaxBodyBytes int64
	// HandshakeTimeout bounds the wait for a peer to accept a stream
	// (default 3s).
	HandshakeTimeout time.Duration
	// SnapshotTimeout bounds one snapshot delivery, which includes the
	// receiver fetching the image (default 10 minutes). On expiry raft is
	// told the snapshot failed and tries again later.
	SnapshotTimeout time.Duration
}

// HTTPTransport is the default Transport: raft messages travel over one
// long-lived streaming POST per peer (/raft/stream), written by one sender
// goroutine per peer in length-prefixed batches (pipelined: the sender never
// waits for a reply), snapshots and proposals over their own requests.
// Every request carries the cluster id, the token and the node ids, checked
// by the receiving Handler; bad requests get a 4xx status.
type HTTPTransport struct {
	opts   HTTPOptions
	client *http.Client
	ownCli bool
	log    *slog.Logger

	local     uint64
	recv      Receiver
	clusterID func() string
	token     string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	peers map[uint64]*httpPeer
	// draining holds removed peers whose senders still deliver their queue.
	draining map[*httpPeer]struct{}

	// started is set once Start has run; until then the handler answers
	// 503, so a host may mount Handler before Open returns.
	started atomic.Bool

	// drop is a test knob: traffic between from and to is dropped (both
	// directions are checked by each side) when it returns true.
	drop atomic.Pointer[func(from, to uint64) bool]
}

// NewHTTPTransport returns an HTTP transport; pass it as Config.Transport
// (Open creates one itself when Config.Transport is nil).
func NewHTTPTransport(opts HTTPOptions) *HTTPTransport {
	if opts.Scheme == "" {
		opts.Scheme = "http"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.QueueMsgs <= 0 {
		opts.QueueMsgs = 4096
	}
	if opts.QueueBytes == 0 {
		opts.QueueBytes = 64 << 20
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 5 << 20
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 3 * time.Second
	}
	if opts.SnapshotTimeout <= 0 {
		opts.SnapshotTimeout = 10 * time.Minute
	}
	t := &HTTPTransport{opts: opts, client: opts.Client, log: opts.Logger, peers: map[uint64]*httpPeer{}, draining: map[*httpPeer]struct{}{}}
	if t.client == nil {
		t.client = &http.Client{Transport: &http.Transport{
			// Forwarded proposals are concurrent requests: keep their
			// connections for reuse rather than dialing per request.
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}}
		t.ownCli = true
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t
}

// Start implements Transport.
func (t *HTTPTransport) Start(local uint64, r Receiver) error {
	t.local, t.recv = local, r
	if id, ok := r.(identity); ok {
		t.clusterID = func() string { c, _ := id.identity(); return c }
		_, t.token = id.identity()
	} else {
		t.clusterID = func() string { return "" }
	}
	t.started.Store(true) // publishes the fields above to the handlers
	return nil
}

func (t *HTTPTransport) dropped(from, to uint64) bool {
	f := t.drop.Load()
	return f != nil && (*f)(from, to)
}

// SetPeer implements Transport.
func (t *HTTPTransport) SetPeer(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		return
	}
	if p, ok := t.peers[id]; ok {
		p.addr.Store(&addr)
		return
	}
	p := &httpPeer{t: t, id: id, q: make(chan []byte, t.opts.QueueMsgs), stop: make(chan struct{}), drain: make(chan struct{})}
	p.addr.Store(&addr)
	t.peers[id] = p
	t.wg.Go(p.run)
}

// RemovePeer implements Transport. The peer's sender still delivers what
// is already queued (the append that tells a removed node its removal
// committed), for at most HandshakeTimeout, and then stops.
func (t *HTTPTransport) RemovePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[id]; ok {
		delete(t.peers, id)
		t.draining[p] = struct{}{}
		close(p.drain)
	}
}

func (t *HTTPTransport) peer(id uint64) *httpPeer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peers[id]
}

// Send implements Transport: it encodes each message now (raft may reuse
// its memory) and queues it for its peer's sender.
func (t *HTTPTransport) Send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		to := m.GetTo()
		p := t.peer(to)
		if p == nil || t.dropped(t.local, to) {
			if m.GetType() == raftpb.MsgSnap {
				// Not from here: Send runs on the raft loop, which is the
				// one that drains the reports ReportSnapshot waits on.
				t.wg.Go(func() { t.recv.ReportSnapshot(to, false) })
			} else {
				t.recv.ReportUnreachable(to)
			}
			continue
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.log.Error("encode raft message", "to", to, "err", err)
			continue
		}
		if m.GetType() == raftpb.MsgSnap {
			t.wg.Go(func() { t.sendSnapshot(p, b) })
			continue
		}
		if !p.enqueue(b) {
			t.recv.ReportUnreachable(to)
		}
	}
}

func (t *HTTPTransport) newRequest(ctx context.Context, addr, path string, to uint64, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.opts.Scheme+"://"+addr+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set(hdrCluster, t.clusterID())
	req.Header.Set(hdrToken, t.token)
	req.Header.Set(hdrFrom, strconv.FormatUint(t.local, 10))
	if to != 0 {
		req.Header.Set(hdrTo, strconv.FormatUint(to, 10))
	}
	return req, nil
}

func (t *HTTPTransport) sendSnapshot(p *httpPeer, msg []byte) {
	ok := false
	defer func() { t.recv.ReportSnapshot(p.id, ok) }()
	frame := appendFrame(nil, [][]byte{msg})
	ctx, cancel := context.WithTimeout(t.ctx, t.opts.SnapshotTimeout)
	defer cancel()
	req, err := t.newRequest(ctx, *p.addr.Load(), pathSnapshot, p.id, bytes.NewReader(frame))
	if err != nil {
		t.log.Error("snapshot request", "to", p.id, "err", err)
		return
	}
	resp, err := t.client.Do(req)
	if err != nil {
		t.log.Warn("send snapshot", "to", p.id, "err", err)
		return
	}
	defer resp.Body.Close()
	if err := decodeErrorResponse(resp); err != nil {
		t.log.Warn("snapshot refused", "to", p.id, "err", err)
		return
	}
	ok = true
}

// Forward implements Transport.
func (t *HTTPTransport) Forward(ctx context.Context, to uint64, fr *ForwardRequest) (*ForwardResponse, error) {
	p := t.peer(to)
	if p == nil || t.dropped(t.local, to) {
		return nil, fmt.Errorf("%w: node %d", ErrUnreachable, to)
	}
	body := make([]byte, 0, 18+len(fr.Data))
	force := byte(0)
	if fr.Force {
		force = 1
	}
	body = append(body, byte(fr.Kind), force)
	body = append(body, fr.Key[:]...)
	body = append(body, fr.Data...)
	req, err := t.newRequest(ctx, *p.addr.Load(), pathPropose, to, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	var out ForwardResponse
	if err := t.do(req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Join implements Transport.
func (t *HTTPTransport) Join(ctx context.Context, helper string, jr *JoinRequest) (*JoinResponse, error) {
	b, err := json.Marshal(jr)
	if err != nil {
		return nil, err
	}
	req, err := t.newRequest(ctx, helper, pathJoin, 0, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set(hdrToken, jr.Token)
	var out JoinResponse
	if err := t.do(req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// do sends a request and decodes a JSON answer or a typed error.
func (t *HTTPTransport) do(req *http.Request, out any) error {
	resp, err := t.client.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return fmt.Errorf("%w: %w", ErrUnreachable, context.Cause(req.Context()))
		}
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	if err := decodeErrorResponse(resp); err != nil {
		return err
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, t.opts.MaxBodyBytes)).Decode(out); err != nil {
		return fmt.Errorf("%w: response from %s: %w", ErrMalformed, req.URL.Host, err)
	}
	return nil
}

// Close implements Transport.
func (t *HTTPTransport) Close() error {
	t.mu.Lock()
	t.cancel()
	for id, p := range t.peers {
		close(p.stop)
		delete(t.peers, id)
	}
	for p := range t.draining {
		close(p.stop)
		delete(t.draining, p)
	}
	t.mu.Unlock()
	t.wg.Wait()
	if t.ownCli {
		t.client.CloseIdleConnections()
	}
	return nil
}

// httpPeer is the sender side of one peer: a bounded queue and one
// goroutine that keeps a stream open and writes batches onto it.
type httpPeer struct {
	t      *HTTPTransport
	id     uint64
	addr   atomic.Pointer[string]
	q      chan []byte
	qbytes atomic.Int64
	stop   chan struct{}
	drain  chan struct{} // closed by RemovePeer: deliver the queue, then stop
}

// drained reports whether the peer was removed and its queue is empty.
func (p *httpPeer) drained() bool {
	select {
	case <-p.drain:
		return len(p.q) == 0
	default:
		return false
	}
}

func (p *httpPeer) enqueue(b []byte) bool {
	if uint64(p.qbytes.Load())+uint64(len(b)) > p.t.opts.QueueBytes {
		return false
	}
	select {
	case p.q <- b:
		p.qbytes.Add(int64(len(b)))
		return true
	default:
		return false
	}
}

func (p *httpPeer) dequeued(b []byte) { p.qbytes.Add(-int64(len(b))) }

// run keeps one stream to the peer open while there is traffic, and backs
// off after failures (dropping what is queued meanwhile: raft resends).
func (p *httpPeer) run() {
	defer func() {
		p.t.mu.Lock()
		delete(p.t.draining, p)
		p.t.mu.Unlock()
	}()
	backoff := 10 * time.Millisecond
	for {
		var first []byte
		select {
		case <-p.stop:
			return
		case first = <-p.q:
			p.dequeued(first)
		case <-p.drain:
			select {
			case first = <-p.q:
				p.dequeued(first)
			default:
				return // removed, and nothing left to deliver
			}
		}
		err := p.stream(first)
		select {
		case <-p.stop:
			return
		case <-p.drain:
			return // removed: what the stream did not deliver is dropped
		default:
		}
		if err == nil {
			backoff = 10 * time.Millisecond
			continue
		}
		p.t.log.Debug("stream to peer ended", "to", p.id, "err", err)
		p.t.recv.ReportUnreachable(p.id)
		t := time.NewTimer(backoff)
		for waiting := true; waiting; {
			select {
			case <-p.stop:
				t.Stop()
				return
			case b := <-p.q: // peer down: drop
				p.dequeued(b)
			case <-t.C:
				waiting = false
			}
		}
		backoff = min(2*backoff, time.Second)
	}
}

// stream opens a streaming POST and writes frames until the stream fails
// or the peer is stopped. The peer's handler answers 200 as soon as it
// accepts the stream and then reads frames until the body ends; a peer that
// does not answer within HandshakeTimeout (a handler that is not ours, a
// hung process) is treated as unreachable.
//
// The body is a streamBody: net/http's connection writer copies it with
// WriteTo, so frames go from the queue to the socket on that goroutine,
// with no pipe and no second goroutine handing each frame over.
func (p *httpPeer) stream(first []byte) error {
	ctx, cancel := context.WithCancel(p.t.ctx)
	defer cancel()
	body := &streamBody{p: p, ctx: ctx, accepted: make(chan struct{})}
	body.pending = appendFrame(nil, [][]byte{first})
	req, err := p.t.newRequest(ctx, *p.addr.Load(), pathStream, p.id, body)
	if err != nil {
		return err
	}
	req.ContentLength = -1
	endc := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		resp, err := p.t.client.Do(req)
		if err == nil {
			err = decodeErrorResponse(resp)
			if err == nil {
				close(body.accepted)
				// The peer ends the stream by ending its answer.
				_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
				if err == nil {
					err = errors.New("stream closed by peer")
				}
			}
			resp.Body.Close()
		}
		endc <- err
	})
	t := time.NewTimer(p.t.opts.HandshakeTimeout)
	select {
	case <-body.accepted:
		t.Stop()
	case err := <-endc:
		t.Stop()
		return err
	case <-t.C:
		return fmt.Errorf("no answer to the stream within %v", p.t.opts.HandshakeTimeout)
	case <-p.stop:
		t.Stop()
		return nil
	}
	drain := p.drain
	var deadline <-chan time.Time
	for {
		select {
		case <-p.stop:
			return nil
		case err := <-endc:
			return err
		case <-drain:
			// Removed: the body ends once the queue is written; a peer
			// that does not take it in time is cut off.
			drain = nil
			t := time.NewTimer(p.t.opts.HandshakeTimeout)
			defer t.Stop()
			deadline = t.C
		case <-deadline:
			return errors.New("removed peer did not take its last messages in time")
		}
	}
}

// streamBatchBytes is how much a stream frame coalesces from the queue
// before it is written: a frame is at most this plus one message.
const streamBatchBytes = 1 << 20

// frameSlack covers a frame's and a message's framing and the envelope
// around an entry's data.
const frameSlack = 64 << 10

// streamBody is a stream's request body: the first frame, then, once the
// peer accepted the stream, batches of whatever the peer's queue holds. It
// ends when ctx does (the stream failed or the peer was removed).
type streamBody struct {
	p        *httpPeer
	ctx      context.Context
	accepted chan struct{} // closed when the peer answered 200
	pending  []byte        // encoded, not yet written (Read's leftovers)
	batch    [][]byte
	buf      []byte // the frame being written (reused: writes are synchronous)
}

// next blocks for the next frame: the pending one, or a batch coalesced
// from the queue (after the peer accepted the stream).
func (b *streamBody) next() ([]byte, error) {
	if len(b.pending) > 0 {
		f := b.pending
		b.pending = nil
		return f, nil
	}
	select {
	case <-b.accepted:
	case <-b.ctx.Done():
		return nil, b.ctx.Err()
	}
	var size int
	select {
	case <-b.ctx.Done():
		return nil, b.ctx.Err()
	case <-b.p.stop:
		return nil, io.EOF
	case m := <-b.p.q:
		b.p.dequeued(m)
		b.batch = append(b.batch[:0], m)
		size = len(m)
	case <-b.p.drain:
		if b.p.drained() {
			return nil, io.EOF // removed, and all queued was written
		}
		m := <-b.p.q // only this goroutine takes from q
		b.p.dequeued(m)
		b.batch = append(b.batch[:0], m)
		size = len(m)
	}
	// Coalesce whatever else is queued into this frame.
	for size < streamBatchBytes {
		select {
		case m := <-b.p.q:
			b.p.dequeued(m)
			b.batch = append(b.batch, m)
			size += len(m)
			continue
		default:
		}
		break
	}
	b.buf = appendFrame(b.buf[:0], b.batch)
	clear(b.batch)
	return b.buf, nil
}

// WriteTo writes frames to w until the stream ends; net/http's copy of
// the body calls it.
func (b *streamBody) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		f, err := b.next()
		if err != nil {
			return n, err
		}
		k, err := w.Write(f)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
}

// Read serves readers that do not use WriteTo (a wrapping RoundTripper).
func (b *streamBody) Read(buf []byte) (int, error) {
	if len(b.pending) == 0 {
		f, err := b.next()
		if err != nil {
			return 0, err
		}
		b.pending = f
	}
	n := copy(buf, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

func (b *streamBody) Close() error { return nil }

// Frame: 4-byte big-endian length N, then N bytes of (uvarint length,
// protobuf raftpb.Message) repeated.
func appendFrame(buf []byte, msgs [][]byte) []byte {
	n := 0
	for _, m := range msgs {
		n += binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(len(m))) + len(m)
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	for _, m := range msgs {
		buf = binary.AppendUvarint(buf, uint64(len(m)))
		buf = append(buf, m...)
	}
	return buf
}

// readFrame reads one frame; io.EOF at a frame boundary ends a stream.
func readFrame(r io.Reader, max int64, scratch []byte) ([]*raftpb.Message, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, scratch, fmt.Errorf("%w: truncated frame header", ErrMalformed)
		}
		return nil, scratch, err
	}
	n := int64(binary.BigEndian.Uint32(hdr[:]))
	if n > max {
		return nil, scratch, fmt.Errorf("%w: frame of %d bytes exceeds the limit of %d", errTooLarge, n, max)
	}
	if int64(cap(scratch)) < n {
		scratch = make([]byte, n)
	}
	scratch = scratch[:n]
	if _, err := io.ReadFull(r, scratch); err != nil {
		return nil, scratch, fmt.Errorf("%w: truncated frame (%d bytes announced): %w", ErrMalformed, n, err)
	}
	msgs, err := decodeFrameBody(scratch)
	return msgs, scratch, err
}

var errTooLarge = fmt.Errorf("%w: too large", ErrMalformed)

// decodeFrameBody decodes the messages of one frame.
func decodeFrameBody(b []byte) ([]*raftpb.Message, error) {
	var msgs []*raftpb.Message
	for len(b) > 0 {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, fmt.Errorf("%w: bad message length in frame", ErrMalformed)
		}
		m := &raftpb.Message{}
		if err := proto.Unmarshal(b[n:n+int(l)], m); err != nil {
			return nil, fmt.Errorf("%w: raft message: %w", ErrMalformed, err)
		}
		if m.Type == nil || m.To == nil || m.From == nil {
			return nil, fmt.Errorf("%w: raft message without type, from or to", ErrMalformed)
		}
		if _, ok := raftpb.MessageType_name[int32(m.GetType())]; !ok {
			return nil, fmt.Errorf("%w: unknown raft message type %d", ErrMalformed, m.GetType())
		}
		msgs = append(msgs, m)
		b = b[n+int(l):]
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	return msgs, nil
}

const (
	hdrCluster = "X-Metatree-Cluster"
	hdrToken   = "X-Metatree-Token"
	hdrFrom    = "X-Metatree-From"
	hdrTo      = "X-Metatree-To"
)

// Handler serves the transport's endpoints (all under /raft/). It may be
// mounted before the Journal using the transport is open (it answers 503
// until then), which spares a joining node's peers a retry.
func (t *HTTPTransport) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathStream, t.serveStream)
	mux.HandleFunc("POST "+pathSnapshot, t.serveSnapshot)
	mux.HandleFunc("POST "+pathPropose, t.servePropose)
	mux.HandleFunc("POST "+pathJoin, t.serveJoin)
	return mux
}

// checkPeer validates the identity headers of a peer request and returns
// the sender's id.
func (t *HTTPTransport) checkPeer(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	if !t.started.Load() || t.ctx.Err() != nil {
		writeError(w, ErrClosed)
		return 0, false
	}
	if !t.checkAuth(w, r, true) {
		return 0, false
	}
	from, err := strconv.ParseUint(r.Header.Get(hdrFrom), 10, 64)
	if err != nil || from == 0 {
		writeError(w, fmt.Errorf("%w: bad %s header", ErrMalformed, hdrFrom))
		return 0, false
	}
	if to, err := strconv.ParseUint(r.Header.Get(hdrTo), 10, 64); err != nil || to != t.local {
		writeError(w, fmt.Errorf("%w: request for node %q reached node %d", ErrClusterMismatch, r.Header.Get(hdrTo), t.local))
		return 0, false
	}
	if t.dropped(from, t.local) {
		writeError(w, fmt.Errorf("%w: partitioned (test)", ErrUnreachable))
		return 0, false
	}
	return from, true
}

func (t *HTTPTransport) checkAuth(w http.ResponseWriter, r *http.Request, needCluster bool) bool {
	if needCluster && r.Header.Get(hdrCluster) != t.clusterID() {
		writeError(w, fmt.Errorf("%w: cluster id %q, this node is in %q", ErrClusterMismatch, r.Header.Get(hdrCluster), t.clusterID()))
		return false
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(hdrToken)), []byte(t.token)) != 1 {
		writeError(w, fmt.Errorf("%w: bad token", ErrClusterMismatch))
		return false
	}
	return true
}

func (t *HTTPTransport) serveStream(w http.ResponseWriter, r *http.Request) {
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
	stop := context.AfterFunc(t.ctx, func() { _ = rc.SetReadDeadline(time.Now()) })
	defer stop()
	// The first frame decides the answer: a bad one gets a 4xx; a good one
	// gets 200 at once (the sender waits for it before it trusts the
	// stream). Errors after that end the stream (logged; the sender
	// reconnects).
	accepted := false
	fail := func(err error) {
		if !accepted {
			writeError(w, err)
			return
		}
		t.log.Warn("stream from peer ended", "from", from, "err", err)
		fmt.Fprintf(w, "error: %v\n", err)
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
			if m.GetFrom() != from || m.GetType() == raftpb.MsgSnap {
				fail(fmt.Errorf("%w: message from %d (type %v) on the stream of node %d", ErrMalformed, m.GetFrom(), m.GetType(), from))
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

func (t *HTTPTransport) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	from, ok := t.checkPeer(w, r)
	if !ok {
		return
	}
	msgs, _, err := readFrame(http.MaxBytesReader(w, r.Body, t.opts.MaxBodyBytes+4), t.opts.MaxBodyBytes, nil)
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("%w: empty snapshot request", ErrMalformed)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if len(msgs) != 1 || msgs[0].GetType() != raftpb.MsgSnap || msgs[0].GetFrom() != from {
		writeError(w, fmt.Errorf("%w: snapshot request must carry one MsgSnap from the sender", ErrMalformed))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer context.AfterFunc(t.ctx, cancel)()
	defer cancel()
	if err := t.recv.Receive(ctx, msgs); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (t *HTTPTransport) servePropose(w http.ResponseWriter, r *http.Request) {
	if _, ok := t.checkPeer(w, r); !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, t.opts.MaxBodyBytes))
	if err != nil {
		writeError(w, fmt.Errorf("%w: %w", errTooLarge, err))
		return
	}
	if len(body) < 18 {
		writeError(w, fmt.Errorf("%w: proposal of %d bytes", ErrMalformed, len(body)))
		return
	}
	fr := &ForwardRequest{Kind: ForwardKind(body[0]), Force: body[1] == 1, Data: body[18:]}
	copy(fr.Key[:], body[2:18])
	ctx, cancel := context.WithCancel(r.Context())
	defer context.AfterFunc(t.ctx, cancel)()
	defer cancel()
	resp, err := t.recv.HandleForward(ctx, fr)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, resp)
}

func (t *HTTPTransport) serveJoin(w http.ResponseWriter, r *http.Request) {
	if !t.started.Load() || t.ctx.Err() != nil {
		writeError(w, ErrClosed)
		return
	}
	if !t.checkAuth(w, r, false) {
		return
	}
	var jr JoinRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&jr); err != nil {
		writeError(w, fmt.Errorf("%w: join request: %w", ErrMalformed, err))
		return
	}
	jr.Token = r.Header.Get(hdrToken)
	ctx, cancel := context.WithCancel(r.Context())
	defer context.AfterFunc(t.ctx, cancel)()
	defer cancel()
	resp, err := t.recv.HandleJoin(ctx, &jr)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, resp)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Wire error codes: a typed error crosses the wire as a code, and comes
// back as the same sentinel.
var errorCodes = []struct {
	code   string
	err    error
	status int
}{
	{"too_large", errTooLarge, http.StatusRequestEntityTooLarge},
	{"entry_too_large", ErrTooLarge, http.StatusRequestEntityTooLarge},
	{"malformed", ErrMalformed, http.StatusBadRequest},
	{"cluster_mismatch", ErrClusterMismatch, http.StatusForbidden},
	{"role_mismatch", ErrRoleMismatch, http.StatusConflict},
	{"unsafe_removal", ErrUnsafeRemoval, http.StatusConflict},
	{"not_caught_up", ErrNotCaughtUp, http.StatusConflict},
	{"unknown_member", ErrUnknownMember, http.StatusGone},
	{"not_leader", ErrNotLeader, http.StatusMisdirectedRequest},
	{"no_leader", ErrNoLeader, http.StatusServiceUnavailable},
	{"busy", ErrBusy, http.StatusServiceUnavailable},
	{"unreachable", ErrUnreachable, http.StatusServiceUnavailable},
	{"halted", ErrHalted, http.StatusServiceUnavailable},
	{"closed", ErrClosed, http.StatusServiceUnavailable},
	{"stale", ErrStale, http.StatusServiceUnavailable},
}

type wireError struct {
	Code  string `json:"code"`
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, err error) {
	status, code := http.StatusInternalServerError, "internal"
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		status, code = http.StatusRequestEntityTooLarge, "too_large"
	} else {
		for _, c := range errorCodes {
			if errors.Is(err, c.err) {
				status, code = c.status, c.code
				break
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(wireError{Code: code, Error: err.Error()})
}

// decodeErrorResponse turns a non-2xx answer into an error wrapping the
// sentinel its code names.
func decodeErrorResponse(resp *http.Response) error {
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var we wireError
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&we)
	for _, c := range errorCodes {
		if c.code == we.Code {
			// The remote text usually starts with the sentinel's own.
			detail := strings.TrimPrefix(strings.TrimPrefix(we.Error, c.err.Error()), ": ")
			if c.err == ErrClosed {
				return fmt.Errorf("%w: remote %w: %s", ErrUnreachable, ErrClosed, detail)
			}
			if detail == "" {
				return fmt.Errorf("remote: %w", c.err)
			}
			return fmt.Errorf("remote: %w: %s", c.err, detail)
		}
	}
	return fmt.Errorf("remote: HTTP %d: %s", resp.StatusCode, we.Error)
}
