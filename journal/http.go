package journal

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metatree/metatree/internal/clock"
)

// HTTPOptions configures the HTTP transport. Zero values mean the defaults
// documented on the matching Config fields.
type HTTPOptions struct {
	// Client sends the requests (default: a client of its own, closed with
	// the transport). Set one with a TLS config for https.
	Client *http.Client
	// Scheme is "http" or "https" (default: "https" with TLS, else
	// "http").
	Scheme string
	// TLS is Config.TLS: with it the transport's own client dials with it,
	// and the Handler requires of every peer a member certificate naming
	// the sender.
	TLS *tls.Config
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
	// Clock times the reconnect backoff and the handshake (default: the
	// real clock).
	Clock Clock
}

// peerConnBuffer is the write and read buffer of the transport's own
// client connections.
const peerConnBuffer = 64 << 10

// HTTPTransport is the default Transport: raft messages travel over one
// long-lived streaming POST per peer (/raft/stream), written by one sender
// goroutine per peer in length-prefixed batches (pipelined: the sender never
// waits for a reply), snapshots and proposals over their own requests.
// Every request carries the cluster id, the token and the node ids, checked
// by the receiving Handler; bad requests get a 4xx status. It also carries
// the sender's address, which a receiver that has not applied the
// sender's addition takes for it (learnpeer.go).
type HTTPTransport struct {
	opts   HTTPOptions
	client *http.Client
	ownCli bool
	log    *slog.Logger

	local     uint64
	recv      Receiver
	clusterID func() string
	token     string
	// book is the Receiver's addressBook (nil when it has none).
	book addressBook

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	peers map[uint64]*httpPeer
	// draining holds removed peers whose senders still deliver their queue.
	draining map[*httpPeer]struct{}

	// refused counts the peer requests refused for their identity.
	refused atomic.Uint64

	// started is set once Start has run; until then the handler answers
	// 503, so a host may mount Handler before Open returns.
	started atomic.Bool

	// drop is a test knob: traffic between from and to is dropped (both
	// directions are checked by each side) when it returns true.
	drop atomic.Pointer[func(from, to uint64) bool]
	// senderStopped is a test knob: it runs after a peer's sender left the
	// transport's maps. It must not block.
	senderStopped atomic.Pointer[func()]
}

// NewHTTPTransport returns an HTTP transport; pass it as Config.Transport
// (Open creates one itself when Config.Transport is nil).
func NewHTTPTransport(opts HTTPOptions) *HTTPTransport {
	if opts.Scheme == "" {
		opts.Scheme = "http"
		if opts.TLS != nil {
			opts.Scheme = "https"
		}
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
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	t := &HTTPTransport{opts: opts, client: opts.Client, log: opts.Logger, peers: map[uint64]*httpPeer{}, draining: map[*httpPeer]struct{}{}}
	if t.client == nil {
		t.client = &http.Client{Transport: &http.Transport{
			// Forwarded proposals are concurrent requests: keep their
			// connections for reuse rather than dialing per request.
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			TLSClientConfig:     opts.TLS,
			// A stream frame is one chunk of the request body, flushed
			// after it is written: with a buffer that holds a typical
			// frame (up to peerConnBuffer) the chunk's header, data and
			// trailer leave in one write, where the default 4 KiB buffer
			// splits them into several.
			WriteBufferSize: peerConnBuffer,
			ReadBufferSize:  peerConnBuffer,
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
	if b, ok := r.(addressBook); ok {
		t.book = b
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

const (
	hdrCluster = "X-Metatree-Cluster"
	hdrToken   = "X-Metatree-Token"
	hdrFrom    = "X-Metatree-From"
	hdrTo      = "X-Metatree-To"
	// hdrAddr is the sender's own address (Config.Addr), which a receiver
	// whose membership does not name the sender yet takes (learnpeer.go).
	hdrAddr = "X-Metatree-Addr"
)
