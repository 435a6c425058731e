package journal

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memSM is a trivial state machine recording what it applied.
type memSM struct {
	mu   sync.Mutex
	ents map[uint64]string
	last uint64
}

func newMemSM() *memSM { return &memSM{ents: map[uint64]string{}} }

func (s *memSM) Apply(index uint64, data []byte) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index <= s.last {
		panic(fmt.Sprintf("apply %d after %d", index, s.last))
	}
	s.last = index
	s.ents[index] = string(data)
	return "ok:" + string(data)
}

func (s *memSM) values() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i := uint64(0); i <= s.last; i++ {
		if v, ok := s.ents[i]; ok {
			out = append(out, v)
		}
	}
	return out
}

func (s *memSM) has(v string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.ents {
		if x == v {
			return true
		}
	}
	return false
}

// node is one journal served over the HTTP transport, in process: its
// peers' requests reach its handler through the cluster's client, with no
// socket, so that the cluster runs in a synctest bubble on virtual time.
type node struct {
	t    *testing.T
	id   uint64
	dir  string
	addr string
	sm   *memSM
	j    *Journal
	tr   *HTTPTransport
	mux  *switchHandler
	// client is the cluster's client, which reaches every node.
	client *http.Client
	// changed receives a token when the journal's changed knob fires
	// (coalesced: one pending token stands for any number of changes).
	changed chan struct{}
}

// signal is the journal's changed knob: it leaves a token without blocking.
func (n *node) signal() {
	select {
	case n.changed <- struct{}{}:
	default:
	}
}

// switchHandler lets a restarted journal take over the same address.
type switchHandler struct {
	mu sync.Mutex
	h  http.Handler
}

func (s *switchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	if h == nil {
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.Header().Set("Connection", "close")
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// cluster is a set of nodes on the HTTP transport in process. Its tests
// run in synctest bubbles: ticks, timeouts and awaits are on virtual time.
type cluster struct {
	t     *testing.T
	nodes map[uint64]*node
	// client carries every request of the nodes' transports to the
	// handler of the node its host names.
	client *http.Client
	mu     sync.Mutex
	cut    map[[2]uint64]bool
	// oneWay drops the messages of one direction only (from, to).
	oneWay map[[2]uint64]bool
	root   string
}

// The test clusters' timing, on the bubble's virtual clock: a 200 ms
// election timeout.
const (
	testTick            = 10 * time.Millisecond
	testElectionTicks   = 20
	testElectionTimeout = testElectionTicks * testTick
)

func testConfig(n *node) Config {
	cfg := Config{
		ID: n.id, Dir: n.dir, Addr: n.addr, Token: "secret",
		StateMachine:  n.sm,
		TickInterval:  testTick,
		ElectionTicks: testElectionTicks, HeartbeatTicks: 2,
		StaleAfter: 300 * time.Millisecond,
	}
	if os.Getenv("JOURNAL_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return cfg
}

// newCluster returns an empty cluster; t is the test of a synctest
// bubble.
func newCluster(t *testing.T) *cluster {
	// The data dirs live under one TempDir registered before the cleanup
	// that stops the nodes, so they are removed after the nodes stopped.
	c := &cluster{t: t, nodes: map[uint64]*node{}, cut: map[[2]uint64]bool{}, root: t.TempDir()}
	c.client = handlerClient(func(host string) http.Handler {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, n := range c.nodes {
			if n.addr == host {
				return n.mux
			}
		}
		return nil
	})
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.closeJournal()
		}
	})
	return c
}

func (c *cluster) dropFn(from, to uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut[[2]uint64{from, to}] || c.cut[[2]uint64{to, from}] || c.oneWay[[2]uint64{from, to}]
}

// partition isolates id from every other node; heal undoes all cuts.
func (c *cluster) partition(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for other := range c.nodes {
		if other != id {
			c.cut[[2]uint64{id, other}] = true
		}
	}
}

func (c *cluster) heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = map[[2]uint64]bool{}
	c.oneWay = nil
}

// listen adds node id, not started, at the address "nodeN".
func (c *cluster) listen(id uint64) *node {
	dir, err := os.MkdirTemp(c.root, fmt.Sprintf("n%d-", id))
	require.NoError(c.t, err)
	n := &node{t: c.t, id: id, dir: dir, addr: fmt.Sprintf("node%d", id), sm: newMemSM(), mux: &switchHandler{}, client: c.client, changed: make(chan struct{}, 1)}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return n
}

// open starts (or restarts) the journal of n with cfg adjusted by mod.
func (c *cluster) open(n *node, mod func(*Config)) error {
	cfg := testConfig(n)
	n.tr = NewHTTPTransport(HTTPOptions{Logger: cfg.Logger, Client: c.client})
	n.tr.t.SetDrop(c.dropFn)
	cfg.Transport = n.tr
	cfg.knobs = &testingKnobs{changed: n.signal}
	if mod != nil {
		mod(&cfg)
	}
	// Serve the transport before Open returns: a joining node's peers
	// reach it as soon as it is a member.
	if h, ok := cfg.Transport.(*HTTPTransport); ok {
		n.mux.mu.Lock()
		n.mux.h = h.Handler()
		n.mux.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := Open(ctx, cfg)
	if err != nil {
		n.mux.mu.Lock()
		n.mux.h = nil
		n.mux.mu.Unlock()
		return err
	}
	n.j = j
	n.mux.mu.Lock()
	n.mux.h = j.Handler()
	n.mux.mu.Unlock()
	return nil
}

func (n *node) closeJournal() {
	if n.j == nil {
		return
	}
	n.mux.mu.Lock()
	n.mux.h = nil
	n.mux.mu.Unlock()
	require.NoError(n.t, n.j.Close())
	n.j = nil
}

// start bootstraps node 1 and joins nodes 2 to voters as voters and the
// next observers nodes as observers, each config adjusted by mods.
func (c *cluster) start(voters int, observers int, mods ...func(*Config)) {
	n1 := c.listen(1)
	require.NoError(c.t, c.open(n1, func(cfg *Config) {
		cfg.Bootstrap = true
		for _, mod := range mods {
			mod(cfg)
		}
	}))
	c.waitLeader(1)
	for i := 2; i <= voters+observers; i++ {
		n := c.listen(uint64(i))
		role := Follower
		if i > voters {
			role = Observer
		}
		require.NoError(c.t, c.open(n, func(cfg *Config) {
			cfg.Join = n1.addr
			cfg.Role = role
			for _, mod := range mods {
				mod(cfg)
			}
		}))
	}
}

// await waits until cond holds, re-checking it each time changed delivers
// a token, and fails the test if it does not hold within d. A change
// between a check and the wait leaves a token, so none is missed.
func await(t *testing.T, d time.Duration, what string, changed <-chan struct{}, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitLeader waits until every running node agrees on one leader among
// the candidates (none: any) and returns it. It re-checks at every
// leadership change on a running node (Journal.Leadership) rather than
// polling, and at least once an election timeout for changes that do not
// notify (a node restarting or learning the leader second-hand).
func (c *cluster) waitLeader(candidates ...uint64) uint64 {
	c.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		// Subscribe before checking, so that no change between them is
		// missed.
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(deadline.C)}}
		for _, n := range c.nodes {
			if n.j != nil {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(n.j.Leadership())})
			}
		}
		if leader := c.agreedLeader(candidates); leader != 0 {
			return leader
		}
		recheck := time.NewTimer(testElectionTimeout)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(recheck.C)})
		chosen, _, _ := reflect.Select(cases)
		recheck.Stop()
		if chosen == 0 {
			c.t.Fatalf("timed out waiting for a leader")
		}
	}
}

// agreedLeader returns the leader every running node follows, if it is
// among the candidates (none: any) and leads in its own view; else 0.
func (c *cluster) agreedLeader(candidates []uint64) uint64 {
	var leader uint64
	for _, n := range c.nodes {
		if n.j == nil {
			continue
		}
		st := n.j.Status()
		if st.Removed {
			continue
		}
		if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return 0
		}
		leader = st.Leader
	}
	if leader == 0 {
		return 0
	}
	ln := c.nodes[leader]
	if ln == nil || ln.j == nil || !ln.j.Status().IsLeader() {
		return 0
	}
	if len(candidates) > 0 && !slices.Contains(candidates, leader) {
		return 0
	}
	return leader
}

// propose proposes v through n and checks that the write returns its
// state machine's answer, applied on n before Propose returned.
func propose(t *testing.T, n *node, v string) uint64 {
	t.Helper()
	idx, val, err := n.j.Propose(ctxT(t, 5*time.Second), []byte(v))
	require.NoError(t, err, "propose %q through node %d", v, n.id)
	require.Equal(t, "ok:"+v, val)
	require.True(t, n.sm.has(v), "node %d applied its own write %q before returning", n.id, v)
	return idx
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
