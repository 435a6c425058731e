package frontendtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// ErrRefused is the dial error for an address nothing listens on.
var ErrRefused = errors.New("frontendtest: connection refused")

// ErrPartitioned is the dial error between two addresses a partition cuts.
var ErrPartitioned = errors.New("frontendtest: addresses partitioned")

// Network is an in-process network of host:port addresses: Listen binds an
// address, Dial (or an http.Transport from Transport) connects to it with
// net.Pipe, so real HTTP servers and clients run unchanged and no socket
// or goroutine outside the caller's is involved (it works inside a
// testing/synctest bubble). Partition cuts the links between addresses:
// dials fail with ErrPartitioned and the open connections close.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*listener
	cut       map[link]bool
	// oneWay holds the directed cuts (CutOneWay), down the addresses that
	// are off the network (SetDown), faults the faulty directed links
	// (SetFaults) and rng their dice (Seed).
	oneWay map[dlink]bool
	down   map[string]bool
	faults map[dlink]Faults
	rng    *rand.Rand
	pairs  map[*pair]struct{}
	// copies runs the copies of connections (Faults.Duplicate) until done
	// closes (Close).
	copies    sync.WaitGroup
	delivered atomic.Uint64 // copies accepted
	done      chan struct{}
	closeOnce sync.Once
}

// link is an unordered pair of addresses.
type link struct{ a, b string }

func newLink(a, b string) link {
	if a > b {
		a, b = b, a
	}
	return link{a, b}
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{
		listeners: map[string]*listener{},
		cut:       map[link]bool{},
		oneWay:    map[dlink]bool{},
		down:      map[string]bool{},
		faults:    map[dlink]Faults{},
		rng:       rand.New(rand.NewPCG(1, 1)),
		pairs:     map[*pair]struct{}{},
		done:      make(chan struct{}),
	}
}

// Listen binds addr until the listener closes; a bound address is an error.
func (n *Network) Listen(addr string) (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.listeners[addr]; ok {
		return nil, fmt.Errorf("frontendtest: listen %s: address in use", addr)
	}
	l := &listener{n: n, addr: addr, accept: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// Dial connects from the address from to the address to. It waits for the
// listener to accept, or for ctx.
func (n *Network) Dial(ctx context.Context, from, to string) (net.Conn, error) {
	n.mu.Lock()
	l, ok := n.listeners[to]
	err := n.blocked(from, to)
	copied := n.faults[dlink{from, to}].Duplicate > 0
	n.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("dial %s: %w", to, ErrRefused)
	}
	client, server := net.Pipe()
	p := &pair{n: n, from: from, to: to, closed: make(chan struct{}), copied: copied}
	p.client = &conn{Conn: client, local: addr(from), remote: addr(to), p: p}
	p.server = &conn{Conn: server, local: addr(to), remote: addr(from), p: p}
	select {
	case l.accept <- p.server:
	case <-l.done:
		return nil, fmt.Errorf("dial %s: %w", to, ErrRefused)
	case <-ctx.Done():
		return nil, fmt.Errorf("dial %s: %w", to, ctx.Err())
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.blocked(from, to); err != nil { // cut while the listener accepted
		p.close()
		return nil, err
	}
	n.pairs[p] = struct{}{}
	return p.client, nil
}

// blocked returns why a dial from from to to fails (ErrPartitioned), or
// nil; n.mu is held.
func (n *Network) blocked(from, to string) error {
	switch {
	case n.down[from] || n.down[to]:
		return fmt.Errorf("dial %s from %s: %w (an address is down)", to, from, ErrPartitioned)
	case n.cut[newLink(from, to)]:
		return fmt.Errorf("dial %s from %s: %w", to, from, ErrPartitioned)
	case n.oneWay[dlink{from, to}]:
		return fmt.Errorf("dial %s from %s: %w (one way)", to, from, ErrPartitioned)
	}
	return nil
}

// Transport returns an http.Transport whose connections come from the
// address from through this network.
func (n *Network) Transport(from string) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, to string) (net.Conn, error) {
			return n.Dial(ctx, from, to)
		},
	}
}

// Partition cuts every link between a and each of others, in both
// directions, and closes the connections open on them.
func (n *Network) Partition(a string, others ...string) {
	n.mu.Lock()
	for _, b := range others {
		n.cut[newLink(a, b)] = true
	}
	closing := n.severed()
	n.mu.Unlock()
	closeAll(closing)
}

// Heal restores every link Partition and CutOneWay cut (not SetDown).
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
	clear(n.oneWay)
}

// severed removes from n.pairs, and returns, the open connections a cut
// or a down address now blocks; n.mu is held.
func (n *Network) severed() []*pair {
	var out []*pair
	for p := range n.pairs {
		if n.blocked(p.from, p.to) != nil {
			delete(n.pairs, p)
			out = append(out, p)
		}
	}
	return out
}

func closeAll(ps []*pair) {
	for _, p := range ps {
		p.close()
	}
}

type addr string

func (a addr) Network() string { return "frontendtest" }
func (a addr) String() string  { return string(a) }

// pair is a dialed connection: both ends, and the direction of the dial.
type pair struct {
	n              *Network
	from, to       string
	client, server *conn
	once           sync.Once
	// closed is closed once either end is: a write waiting out its link's
	// delay gives up then, as the write would fail.
	closed chan struct{}
	// reset is set when the network reset the connection (Faults.Reset):
	// both ends' reads and writes then fail with ErrReset, whichever end
	// notices first.
	reset atomic.Bool
	// copied is set when the link copied connections as p was dialed
	// (Faults.Duplicate): rec keeps what the dialing end wrote, for the
	// copies.
	copied bool
	recMu  sync.Mutex
	rec    []byte
	inCopy atomic.Bool // a copy of p is on its way or open
}

func (p *pair) close() {
	p.ended()
	_ = p.client.Conn.Close()
	_ = p.server.Conn.Close()
}

// ended marks the connection as ended by either end.
func (p *pair) ended() { p.once.Do(func() { close(p.closed) }) }

// conn is one end of a pipe with the addresses of its link.
type conn struct {
	net.Conn
	local, remote addr
	p             *pair
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

// Write passes b on after the link's delay (Faults), or resets the
// connection when the link's dice say so.
func (c *conn) Write(b []byte) (int, error) {
	if c == c.p.client && c.p.copied {
		c.p.record(b)
	}
	if err := c.p.n.fault(c.p, string(c.local), string(c.remote)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	return n, c.resetErr(err)
}

// Read reads from the pipe; on a connection the network reset, the
// error is ErrReset.
func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	return n, c.resetErr(err)
}

// resetErr returns err, or ErrReset in its place when the network reset
// the connection.
func (c *conn) resetErr(err error) error {
	if err != nil && c.p.reset.Load() {
		return fmt.Errorf("%s to %s: %w", c.local, c.remote, ErrReset)
	}
	return err
}

// Close closes this end (the other end's reads see EOF) and forgets the
// connection.
func (c *conn) Close() error {
	c.p.n.mu.Lock()
	delete(c.p.n.pairs, c.p)
	c.p.n.mu.Unlock()
	c.p.ended()
	return c.Conn.Close()
}

// listener hands dialed pipes to Accept until it closes.
type listener struct {
	n      *Network
	addr   string
	accept chan net.Conn
	once   sync.Once
	done   chan struct{}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close unbinds the address; connections already accepted stay open.
func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.listeners[l.addr] == l {
			delete(l.n.listeners, l.addr)
		}
		l.n.mu.Unlock()
	})
	return nil
}

func (l *listener) Addr() net.Addr { return addr(l.addr) }
