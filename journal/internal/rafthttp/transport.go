package rafthttp

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/clock"
)

// Options configures a Transport. It is journal.HTTPOptions (an alias),
// whose doc comment is the reference for each field. New fills the zero
// ones: Scheme "https" with TLS, else "http"; a discarding Logger; 4096
// messages and 64 MiB queued a peer; 5 MiB a frame or request body; a
// handshake timeout of 3s and a snapshot timeout of 10 minutes; the real
// clock; and, without a Client, a client of its own that dials with TLS
// and is closed with the transport.
type Options struct {
	Client           *http.Client
	Scheme           string
	TLS              *tls.Config
	Logger           *slog.Logger
	QueueMsgs        int
	QueueBytes       uint64
	MaxBodyBytes     int64
	HandshakeTimeout time.Duration
	SnapshotTimeout  time.Duration
	Clock            clock.Clock
}

// peerConnBuffer is the write and read buffer of the transport's own
// client connections.
const peerConnBuffer = 64 << 10

// Transport carries a journal's traffic over HTTP: raft messages travel
// over one long-lived streaming POST per peer (/raft/stream), written by
// one sender goroutine per peer in length-prefixed batches (pipelined: the
// sender never waits for a reply), snapshots and proposals over their own
// requests.
// Every request carries the cluster id, the token and the node ids, checked
// by the receiving Handler; bad requests get a 4xx status.
type Transport struct {
	opts   Options
	client *http.Client
	ownCli bool
	log    *slog.Logger

	local uint64
	recv  Node
	id    Identity

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	peers map[uint64]*sender
	// draining holds removed peers whose senders still deliver their queue.
	draining map[*sender]struct{}

	// refused counts the peer requests refused for their identity.
	refused atomic.Uint64

	// started is set once Start has run; until then the handler answers
	// 503, so a host may mount Handler before Open returns.
	started atomic.Bool

	// drop is a test knob (SetDrop): traffic between from and to is
	// dropped (both directions are checked by each side) when it returns
	// true.
	drop atomic.Pointer[func(from, to uint64) bool]
	// senderStopped is a test knob: it runs after a peer's sender left the
	// transport's maps. It must not block.
	senderStopped atomic.Pointer[func()]
}

// New returns a transport with opts' zero fields filled. It starts no
// goroutine: SetPeer starts each peer's sender.
func New(opts Options) *Transport {
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
	t := &Transport{opts: opts, client: opts.Client, log: opts.Logger, peers: map[uint64]*sender{}, draining: map[*sender]struct{}{}}
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

// Start makes the transport deliver to n as node local, stamping and
// checking requests with id. It is called once, before SetPeer; until then
// the Handler answers ErrClosed (503).
func (t *Transport) Start(local uint64, n Node, id Identity) {
	if id.ClusterID == nil {
		id.ClusterID = func() string { return "" }
	}
	t.local, t.recv, t.id = local, n, id
	t.started.Store(true) // publishes the fields above to the handlers
}

// SetDrop installs a test knob: traffic between from and to is dropped
// (both directions are checked by each side) while drop returns true.
func (t *Transport) SetDrop(drop func(from, to uint64) bool) { t.drop.Store(&drop) }

func (t *Transport) dropped(from, to uint64) bool {
	f := t.drop.Load()
	return f != nil && (*f)(from, to)
}

// SetPeer adds peer id at addr, starting its sender, or updates the
// address of a known one.
func (t *Transport) SetPeer(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		return
	}
	if p, ok := t.peers[id]; ok {
		p.addr.Store(&addr)
		return
	}
	p := &sender{t: t, id: id, q: make(chan []byte, t.opts.QueueMsgs), stop: make(chan struct{}), drain: make(chan struct{})}
	p.addr.Store(&addr)
	t.peers[id] = p
	t.wg.Go(p.run)
}

// RemovePeer removes peer id. The peer's sender still delivers what
// is already queued (the append that tells a removed node its removal
// committed), for at most HandshakeTimeout, and then stops.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[id]; ok {
		delete(t.peers, id)
		t.draining[p] = struct{}{}
		close(p.drain)
	}
}

func (t *Transport) peer(id uint64) *sender {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peers[id]
}

// Close stops every sender and waits for them; the Handler answers
// ErrClosed from then on.
func (t *Transport) Close() error {
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

// The headers every request carries: the cluster id and token (the
// Identity), the sender's and the addressee's node ids, and the sender's
// address (Identity.Addr), which a receiver that has not applied the
// sender's addition takes for it (PeerLearner).
const (
	HeaderCluster = "X-Metatree-Cluster"
	HeaderToken   = "X-Metatree-Token"
	HeaderFrom    = "X-Metatree-From"
	HeaderTo      = "X-Metatree-To"
	HeaderAddr    = "X-Metatree-Addr"
)

// Paths the transport serves under its Handler. They all start with
// /raft/ so the host can mount the handler with one pattern.
const (
	PathStream   = "/raft/stream"
	PathSnapshot = "/raft/snapshot"
	PathPropose  = "/raft/propose"
	PathJoin     = "/raft/join"
)

// Identity is what the transport stamps on every request it sends and
// requires of every request it serves.
type Identity struct {
	// ClusterID returns the cluster's id (nil: ""). It is a function
	// because a joining node learns its cluster's id from the join.
	ClusterID func() string
	// Token is the cluster's shared secret.
	Token string
	// Addr is the local node's address, stamped on every request
	// (HeaderAddr; "": none).
	Addr string
}

// PeerLearner is optionally implemented by a Node: the transport hands it
// the address a request gives (HeaderAddr) for a sender it has no peer
// for. A member that missed the sender's addition cannot answer it
// otherwise, and never catches up once the sender leads.
type PeerLearner interface {
	LearnPeer(id uint64, addr string)
}

// Node is the local node the transport delivers inbound traffic to (the
// journal's Receiver behind an adapter). Its methods are safe for
// concurrent use; the transport calls them from its handlers and senders.
type Node interface {
	// Receive steps inbound raft messages; for a MsgSnap it returns once
	// the snapshot is durable and stepped, or with an error.
	Receive(ctx context.Context, msgs []*raftpb.Message) error
	// HandleForward proposes a forwarded entry; the answer is sent back
	// as JSON.
	HandleForward(ctx context.Context, p Proposal) (any, error)
	// DecodeJoin decodes a join request body and returns it with the id
	// of the member it asks to admit (the id its sender must prove).
	DecodeJoin(r io.Reader) (req any, claimed uint64, err error)
	// HandleJoin admits the member req (from DecodeJoin) that presented
	// token; the answer is sent back as JSON.
	HandleJoin(ctx context.Context, req any, token string) (any, error)
	// ReportUnreachable, ReportRemoved and ReportSnapshot feed raft's
	// flow control; see journal.Receiver.
	ReportUnreachable(id uint64)
	ReportRemoved(id uint64)
	ReportSnapshot(id uint64, ok bool)
}

// Proposal is a forwarded proposal as it travels: on the wire a kind
// byte, a force byte (1: forced), the 16-byte key and the data.
type Proposal struct {
	Kind  uint8
	Force bool
	Key   [16]byte
	Data  []byte
}
