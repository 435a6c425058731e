package frontendtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
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
	conns     map[link]map[*conn]struct{}
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
		conns:     map[link]map[*conn]struct{}{},
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
	cut := n.cut[newLink(from, to)]
	n.mu.Unlock()
	if cut {
		return nil, fmt.Errorf("dial %s from %s: %w", to, from, ErrPartitioned)
	}
	if !ok {
		return nil, fmt.Errorf("dial %s: %w", to, ErrRefused)
	}
	client, server := net.Pipe()
	lk := newLink(from, to)
	c := &conn{Conn: client, local: addr(from), remote: addr(to)}
	s := &conn{Conn: server, local: addr(to), remote: addr(from)}
	select {
	case l.accept <- s:
	case <-l.done:
		return nil, fmt.Errorf("dial %s: %w", to, ErrRefused)
	case <-ctx.Done():
		return nil, fmt.Errorf("dial %s: %w", to, ctx.Err())
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut[lk] { // cut while the listener accepted
		_ = c.Close()
		_ = s.Close()
		return nil, fmt.Errorf("dial %s from %s: %w", to, from, ErrPartitioned)
	}
	if n.conns[lk] == nil {
		n.conns[lk] = map[*conn]struct{}{}
	}
	n.conns[lk][c] = struct{}{}
	n.conns[lk][s] = struct{}{}
	return c, nil
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
	var closing []*conn
	for _, b := range others {
		lk := newLink(a, b)
		n.cut[lk] = true
		for c := range n.conns[lk] {
			closing = append(closing, c)
		}
		delete(n.conns, lk)
	}
	n.mu.Unlock()
	for _, c := range closing {
		_ = c.Close()
	}
}

// Heal restores every link Partition cut.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
}

type addr string

func (a addr) Network() string { return "frontendtest" }
func (a addr) String() string  { return string(a) }

// conn is one end of a pipe with the addresses of its link.
type conn struct {
	net.Conn
	local, remote addr
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

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
