package heartbeat_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/responder"
	"github.com/metatree/metatree/internal/fakejournal"
)

const (
	interval  = time.Second
	deadAfter = 3
)

// network routes heartbeats to handlers in process. A blackholed route
// never answers (the request hits its deadline); a delayed one answers late.
type network struct {
	mu       sync.Mutex
	handlers map[string]http.Handler
	black    map[[2]string]bool // (from, to) cut
	delay    map[string]time.Duration
}

type transport struct {
	n    *network
	from string
}

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.n.mu.Lock()
	h := t.n.handlers[req.URL.Host]
	cut := t.n.black[[2]string{t.from, req.URL.Host}] || t.n.black[[2]string{"*", req.URL.Host}]
	delay := t.n.delay[req.URL.Host]
	t.n.mu.Unlock()
	if cut {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	if h == nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result(), nil
}

func (n *network) set(addr string, h http.Handler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h == nil {
		delete(n.handlers, addr)
	} else {
		n.handlers[addr] = h
	}
}

func (n *network) cut(from, to string, on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.black[[2]string{from, to}] = on
}

func (n *network) slow(to string, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay[to] = d
}

type frontend struct {
	id    uint64
	addr  string
	tree  *catalog.Tree
	ms    *heartbeat.Membership
	reg   *cancel.Registry
	mu    sync.Mutex
	evs   []epoch.Event
	epoch epoch.Epoch
}

func (f *frontend) events() []epoch.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]epoch.Event(nil), f.evs...)
}

type worker struct {
	id    uint64
	addr  string
	resp  *responder.Responder
	reg   *cancel.Registry
	mu    sync.Mutex
	evs   []epoch.Event
	epoch epoch.Epoch
}

func (w *worker) events() []epoch.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]epoch.Event(nil), w.evs...)
}

type cluster struct {
	t         *testing.T
	log       *fakejournal.Log
	net       *network
	frontends map[uint64]*frontend
	workers   map[uint64]*worker
	grace     time.Duration
	logger    *slog.Logger // the frontends' (nil: discard)
}

func addrOf(id uint64) string { return fmt.Sprintf("node%d:80", id) }

// newCluster starts frontends 1..nf (1 leads in term 1) and workers
// 10..10+nw-1, adds them all as members and lets one round record their
// epochs. Call it inside a synctest bubble.
func newCluster(t *testing.T, nf, nw int) *cluster { return newClusterWith(t, nf, nw, nil) }

// newClusterWith is newCluster with the frontends logging to logger.
func newClusterWith(t *testing.T, nf, nw int, logger *slog.Logger) *cluster {
	c := &cluster{t: t, grace: deadAfter * interval, logger: logger,
		log:       fakejournal.New(),
		net:       &network{handlers: map[string]http.Handler{}, black: map[[2]string]bool{}, delay: map[string]time.Duration{}},
		frontends: map[uint64]*frontend{}, workers: map[uint64]*worker{}}
	for i := range nf {
		id := uint64(i + 1)
		tree := catalog.New()
		c.log.Attach(id, tree)
		c.log.SetLease(id, 1, id == 1)
		c.startFrontend(id, tree)
	}
	for i := range nw {
		c.startWorker(uint64(10 + i))
	}
	ctx := context.Background()
	for id := range uint64(nf) {
		require.NoError(t, c.frontends[1].ms.Add(ctx, heartbeat.Member{ID: id + 1, Addr: addrOf(id + 1), Kind: epoch.KindFrontend, Role: "follower"}))
	}
	for i := range nw {
		id := uint64(10 + i)
		require.NoError(t, c.frontends[1].ms.Add(ctx, heartbeat.Member{ID: id, Addr: addrOf(id), Kind: epoch.KindWorker}))
	}
	t.Cleanup(c.close)
	// Two rounds: every member's epoch journaled, then published to workers.
	c.advance(2 * interval)
	for _, f := range c.frontends {
		for _, m := range f.ms.Members() {
			require.False(t, m.Epoch.IsZero(), "member %d has no epoch after two rounds", m.ID)
		}
	}
	return c
}

func (c *cluster) startFrontend(id uint64, tree *catalog.Tree) *frontend {
	f := &frontend{id: id, addr: addrOf(id), tree: tree, reg: cancel.New(cancel.Config{}), epoch: epoch.New()}
	ms, err := heartbeat.New(heartbeat.Config{
		ID: id, Epoch: f.epoch, Cluster: "test", Tree: tree, Journal: c.log.Replica(id),
		Client:   &http.Client{Transport: transport{n: c.net, from: f.addr}},
		Interval: interval, DeadAfter: deadAfter, Grace: c.grace, Logger: c.logger,
		OnEvent: func(ev epoch.Event) {
			f.mu.Lock()
			f.evs = append(f.evs, ev)
			f.mu.Unlock()
			f.reg.Apply(ev)
		},
	})
	require.NoError(c.t, err)
	f.ms = ms
	c.net.set(f.addr, ms.Handler())
	c.frontends[id] = f
	return f
}

func (c *cluster) startWorker(id uint64) *worker {
	w := &worker{id: id, addr: addrOf(id), reg: cancel.New(cancel.Config{}), epoch: epoch.New()}
	r, err := responder.New(responder.Config{ID: id, Epoch: w.epoch, Cluster: "test", StaleAfter: 5 * interval,
		OnEvent: func(ev epoch.Event) {
			w.mu.Lock()
			w.evs = append(w.evs, ev)
			w.mu.Unlock()
			w.reg.Apply(ev)
		}})
	require.NoError(c.t, err)
	w.resp = r
	c.net.set(w.addr, r)
	c.workers[id] = w
	return w
}

// restartWorker replaces worker id's process: new epoch, empty registry.
func (c *cluster) restartWorker(id uint64) *worker {
	old := c.workers[id]
	c.net.set(old.addr, nil)
	require.NoError(c.t, old.reg.Close())
	return c.startWorker(id)
}

// restartFrontend replaces frontend id's process (new epoch, same tree).
func (c *cluster) restartFrontend(id uint64) *frontend {
	old := c.frontends[id]
	c.net.set(old.addr, nil)
	require.NoError(c.t, old.ms.Close())
	require.NoError(c.t, old.reg.Close())
	return c.startFrontend(id, old.tree)
}

func (c *cluster) setLeader(leader, term uint64) { c.log.SetLeader(term, leader) }

// advance lets virtual time pass and waits until every goroutine is idle.
func (c *cluster) advance(d time.Duration) {
	time.Sleep(d)
	synctestWait()
}

func (c *cluster) close() {
	for _, f := range c.frontends {
		require.NoError(c.t, f.ms.Close())
		require.NoError(c.t, f.reg.Close())
	}
	for _, w := range c.workers {
		require.NoError(c.t, w.reg.Close())
	}
}

// countType counts events of a type for a node.
func countType(evs []epoch.Event, node uint64, typ epoch.EventType) int {
	n := 0
	for _, e := range evs {
		if e.Node == node && e.Type == typ {
			n++
		}
	}
	return n
}

func requireCancelled(t *testing.T, q *cancel.Query, sentinel error, node uint64) {
	t.Helper()
	require.Error(t, q.Context().Err(), "query not cancelled")
	var ce *cancel.CanceledError
	require.ErrorAs(t, context.Cause(q.Context()), &ce)
	require.ErrorIs(t, ce, sentinel)
	require.Equal(t, node, ce.Node)
}

func member(f interface {
	Member(uint64) (heartbeat.Member, bool)
}, id uint64) cancel.Member {
	m, _ := f.Member(id)
	return cancel.Member{Node: id, Epoch: m.PublishedEpoch()}
}

// pausingClock is the real (bubble) clock plus an offset that jumps, as a
// process that was frozen sees the time when it resumes.
type pausingClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *cluster) pausingClock() *pausingClock { return &pausingClock{} }

func (p *pausingClock) pause(d time.Duration) {
	p.mu.Lock()
	p.offset += d
	p.mu.Unlock()
}

func (p *pausingClock) Now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Now().Add(p.offset)
}

func (p *pausingClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

func (p *pausingClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

func (p *pausingClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// restartFrontendWithClock replaces frontend id's Membership with one using clk.
func (c *cluster) restartFrontendWithClock(id uint64, clk heartbeat.Clock) {
	old := c.frontends[id]
	require.NoError(c.t, old.ms.Close())
	ms, err := heartbeat.New(heartbeat.Config{
		ID: id, Epoch: old.epoch, Cluster: "test", Tree: old.tree, Journal: c.log.Replica(id),
		Client:   &http.Client{Transport: transport{n: c.net, from: old.addr}},
		Interval: interval, DeadAfter: deadAfter, Grace: c.grace, Clock: clk,
		OnEvent: func(ev epoch.Event) {
			old.mu.Lock()
			old.evs = append(old.evs, ev)
			old.mu.Unlock()
			old.reg.Apply(ev)
		},
	})
	require.NoError(c.t, err)
	old.ms = ms
	c.net.set(old.addr, ms.Handler())
}
