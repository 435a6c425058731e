package journaltest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/metatree/metatree/internal/durable"

	"github.com/metatree/metatree/journal"
)

// Options configures NewCluster. The zero value is a 3-voter in-memory
// cluster with 10 ms ticks.
type Options struct {
	// Voters is the number of voting nodes (default 3); node 1 bootstraps
	// the cluster and the others join through it.
	Voters int
	// Observers is the number of learners added after the voters.
	Observers int
	// Seed seeds the network's random faults (default 1).
	Seed uint64
	// OnDisk puts every node's data dir under t.TempDir() on the real disk
	// instead of an in-memory filesystem. Crash needs the in-memory one.
	OnDisk bool
	// TickInterval is the raft tick (default 10ms); ElectionTicks defaults
	// to 20, HeartbeatTicks to 2: a 200 ms election timeout, long enough
	// that a loaded CI machine does not elect spuriously.
	TickInterval   time.Duration
	ElectionTicks  int
	HeartbeatTicks int
	// NewStateMachine returns the state machine for node id each time it
	// is opened (restarts replay the log into a fresh one). Default: a new
	// *Recorder.
	NewStateMachine func(id uint64) journal.StateMachine
	// Configure, if set, adjusts each node's Config before Open.
	Configure func(cfg *journal.Config)
	// Logger receives the nodes' logs (default: discard).
	Logger *slog.Logger
	// Transport picks what carries the nodes' traffic: the in-memory
	// Network (default), journal's HTTP transport over loopback sockets,
	// or journal's HTTP transport served in process.
	Transport TransportKind
	// TLS, with the HTTP transport, serves and dials with mutual TLS:
	// node id's listener serves with server and its journal dials with
	// client (journal.Config.TLS).
	TLS func(id uint64) (server, client *tls.Config)
	// WrapFS, if set, wraps node id's filesystem each time the node is
	// opened (to count or slow its syncs, say); Crash cuts the power of
	// the filesystem underneath.
	WrapFS func(id uint64, fs vfs.FS) vfs.FS
	// Host, if set, runs beside each run of every node, as a host process
	// wires its own components around the journal: see Host.
	Host func(ctx context.Context, id uint64, cfg *journal.Config) (Host, error)
	// Unstarted makes NewCluster add the nodes without starting any:
	// Restart (or RestartCrashingAt) starts each, so that a test can form
	// the cluster under faults.
	Unstarted bool
}

// TransportKind is what carries a Cluster's traffic.
type TransportKind int

const (
	// InMemory is the Network: no sockets, faults injected through
	// Cluster.Net, usable in a synctest bubble.
	InMemory TransportKind = iota
	// HTTP is journal's default transport, each node serving its
	// Journal.Handler on a loopback port it keeps across restarts: the
	// real wire, with TLS when Options.TLS is set. Cluster.Net is nil.
	HTTP
	// HTTPInProcess is journal's HTTP transport whose client calls the
	// handler of the node a request's host names (HandlerClient), with
	// no socket, so that it runs in a synctest bubble. Node id's address
	// is "nodeID", kept across restarts; it serves its transport's
	// handler from before Open (a joining node's peers reach it as soon as
	// it is a member) and answers 503 while the node is down. Cluster.Net
	// is nil; Options.Configure sees the *journal.HTTPTransport in
	// cfg.Transport, and may wrap it in a Transport of its own that has
	// the same Handler method. Cluster.Client sends a test's own requests.
	HTTPInProcess
)

// TB is the part of testing.TB a Cluster uses; *testing.T and *testing.B
// satisfy it.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
}

var _ TB = testing.TB(nil)

// Cluster is a set of journal nodes on one in-memory Network. Its methods
// are safe for concurrent use, but a node should not be stopped and
// restarted from two goroutines at once.
type Cluster struct {
	tb   TB
	opts Options
	// Net is the network between the nodes; use it to inject faults. It
	// is nil with either HTTP transport (HTTP, HTTPInProcess).
	Net *Network
	// root holds the nodes' data dirs with Options.OnDisk.
	root string

	// client carries the requests of every node's transport with
	// HTTPInProcess.
	client *http.Client

	mu    sync.Mutex
	nodes map[uint64]*Node
}

// Node is one member of a Cluster.
type Node struct {
	ID   uint64
	Addr string
	Role journal.Role
	// Dir is the node's data dir, on the node's filesystem.
	Dir string

	fs  vfs.FS
	srv *server // the loopback or in-process server, with an HTTP transport

	mu   sync.Mutex
	j    *journal.Journal
	sm   journal.StateMachine
	host Host // of the current run, if Options.Host is set
	// opened is set once an Open of the node completed on the disk it
	// has: until then node 1 bootstraps and the others join.
	opened bool
}

// Journal returns the running journal, or nil while the node is down.
func (n *Node) Journal() *journal.Journal {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.j
}

// StateMachine returns the state machine of the current (or last) run.
func (n *Node) StateMachine() journal.StateMachine {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sm
}

// NewCluster starts a cluster and waits until every node has joined. It
// fails the test if that does not happen within 30 s. t.Cleanup closes it.
// With Options.Unstarted it adds the nodes and starts none.
func NewCluster(tb TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Voters == 0 {
		opts.Voters = 3
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.TickInterval == 0 {
		opts.TickInterval = 10 * time.Millisecond
	}
	if opts.ElectionTicks == 0 {
		opts.ElectionTicks = 20
	}
	if opts.HeartbeatTicks == 0 {
		opts.HeartbeatTicks = 2
	}
	if opts.NewStateMachine == nil {
		opts.NewStateMachine = func(uint64) journal.StateMachine { return &Recorder{} }
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{tb: tb, opts: opts, nodes: map[uint64]*Node{}}
	if opts.OnDisk {
		// The data dirs live under one TempDir registered before the
		// cleanup that closes the nodes, so that they are removed after
		// the nodes stopped writing to them.
		c.root = tb.TempDir()
	}
	switch opts.Transport {
	case InMemory:
		c.Net = NewNetwork(opts.Seed)
	case HTTPInProcess:
		c.client = HandlerClient(c.handler)
	}
	tb.Cleanup(c.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	total := opts.Voters + opts.Observers
	for i := 1; i <= total; i++ {
		id := uint64(i)
		role := journal.Follower
		if i > opts.Voters {
			role = journal.Observer
		}
		n, err := c.newNode(id, role)
		if err != nil {
			tb.Fatalf("journaltest: %v", err)
		}
		if opts.Unstarted {
			continue
		}
		if err := c.open(ctx, n, n.fs); err != nil {
			tb.Fatalf("journaltest: start node %d: %v", id, err)
		}
		// Over HTTP, on real time, every node follows one leader before
		// the next joins: a join while the previous joiner catches up can
		// find no quorum.
		if i == 1 || opts.Transport == HTTP {
			if _, err := c.WaitLeader(ctx); err != nil {
				tb.Fatalf("journaltest: a leader after node %d started: %v", id, err)
			}
		}
	}
	return c
}

// newNode makes node id's empty data dir and adds it to the cluster's
// nodes (not started).
func (c *Cluster) newNode(id uint64, role journal.Role) (*Node, error) {
	n := &Node{ID: id, Addr: fmt.Sprintf("node%d", id), Role: role}
	name := n.Addr
	switch c.opts.Transport {
	case HTTPInProcess:
		n.srv = &server{addr: n.Addr}
	case HTTP:
		var serverTLS *tls.Config
		if c.opts.TLS != nil {
			serverTLS, _ = c.opts.TLS(id)
		}
		srv, err := listen(serverTLS)
		if err != nil {
			return nil, err
		}
		n.srv, n.Addr = srv, srv.addr
	}
	if c.opts.OnDisk {
		n.fs, n.Dir = vfs.Default, filepath.Join(c.root, name)
	} else {
		n.fs, n.Dir = vfs.NewCrashableMem(), "/"+name
		// Create the data dir durably, as an installer would: a crash
		// must not take the directory itself away.
		if err := durable.MkdirAll(n.fs, n.Dir); err != nil {
			n.srv.close()
			return nil, err
		}
	}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return n, nil
}

// AddNode starts a new node, the next id, that joins the cluster through
// the lowest-numbered running node, and returns it once Open returned. On
// an error (the cluster refused it) the node stays in Nodes, not running.
func (c *Cluster) AddNode(ctx context.Context, role journal.Role) (*Node, error) {
	c.mu.Lock()
	var id uint64
	for nid := range c.nodes {
		id = max(id, nid)
	}
	c.mu.Unlock()
	n, err := c.newNode(id+1, role)
	if err != nil {
		return nil, fmt.Errorf("journaltest: add node %d: %w", id+1, err)
	}
	if err := c.open(ctx, n, n.fs); err != nil {
		return n, err
	}
	return n, nil
}

// config is node n's Config on filesystem fs: node 1 bootstraps until an
// Open of it completed, every other node joins.
func (c *Cluster) config(n *Node, fs vfs.FS) journal.Config {
	n.mu.Lock()
	bootstrap := n.ID == 1 && !n.opened
	n.mu.Unlock()
	if c.opts.WrapFS != nil {
		fs = c.opts.WrapFS(n.ID, fs)
	}
	cfg := journal.Config{
		ID: n.ID, Dir: n.Dir, Addr: n.Addr, FS: fs,
		StateMachine:   c.opts.NewStateMachine(n.ID),
		Logger:         c.opts.Logger,
		TickInterval:   c.opts.TickInterval,
		ElectionTicks:  c.opts.ElectionTicks,
		HeartbeatTicks: c.opts.HeartbeatTicks,
	}
	if c.Net != nil {
		cfg.Transport = c.Net.Transport(n.Addr)
	} else if c.client != nil {
		cfg.Transport = journal.NewHTTPTransport(journal.HTTPOptions{Client: c.client, Logger: c.opts.Logger})
	} else if c.opts.TLS != nil {
		_, cfg.TLS = c.opts.TLS(n.ID)
	}
	if bootstrap {
		cfg.Bootstrap = true
	} else {
		cfg.Join = c.Node(1).Addr
		for _, r := range c.Running() {
			if r.ID != n.ID {
				cfg.Join = r.Addr // the lowest-numbered running node
				break
			}
		}
		cfg.Role = n.Role
	}
	if c.opts.Configure != nil {
		c.opts.Configure(&cfg)
	}
	return cfg
}

// open opens node n on filesystem fs (n.fs, or a CrashFS over it), with
// its Host around the journal.
func (c *Cluster) open(ctx context.Context, n *Node, fs vfs.FS) error {
	cfg := c.config(n, fs)
	var host Host
	if c.opts.Host != nil {
		h, err := c.opts.Host(ctx, n.ID, &cfg)
		if err != nil {
			if cfg.Transport != nil {
				_ = cfg.Transport.Close()
			}
			return fmt.Errorf("journaltest: node %d: host: %w", n.ID, err)
		}
		host = h
	}
	// In process, a node serves its transport's handler from before Open:
	// that of journal's HTTPTransport, or of a host's Transport wrapping
	// one, which the journal does not know (Journal.Handler would not
	// serve it).
	served, _ := cfg.Transport.(interface{ Handler() http.Handler })
	if c.client != nil && served != nil {
		n.srv.serve(served.Handler())
	}
	j, err := journal.Open(ctx, cfg)
	if err != nil {
		n.srv.serve(nil)
		if cfg.Transport != nil {
			_ = cfg.Transport.Close()
		}
		if host != nil {
			err = errors.Join(err, host.Close())
		}
		return err
	}
	n.mu.Lock()
	n.j, n.sm, n.host, n.opened = j, cfg.StateMachine, host, true
	n.mu.Unlock()
	// The journal's own HTTP transport is reachable once Open returned.
	if c.client == nil || served == nil {
		n.srv.serve(j.Handler())
	}
	if host != nil {
		if err := host.Started(ctx, j); err != nil {
			return errors.Join(fmt.Errorf("journaltest: node %d: host: %w", n.ID, err), c.stop(n))
		}
	}
	return nil
}

// stop closes node n's current run, whatever state it got to: its Host
// stops, its journal closes, then its Host closes.
func (c *Cluster) stop(n *Node) error {
	n.mu.Lock()
	j, host := n.j, n.host
	n.j, n.host = nil, nil
	n.mu.Unlock()
	if j == nil {
		return nil
	}
	n.srv.serve(nil)
	var errs []error
	if host != nil {
		errs = append(errs, host.Stop())
	}
	errs = append(errs, j.Close())
	if host != nil {
		errs = append(errs, host.Close())
	}
	return errors.Join(errs...)
}

// setDown takes node id off the network, or brings it back: on the
// Network, or by refusing every request at its loopback server.
func (c *Cluster) setDown(n *Node, down bool) {
	if c.Net != nil {
		c.Net.SetDown(n.ID, down)
	} else if down {
		n.srv.serve(nil)
	}
}

// handler returns the handler of the node at addr, for HandlerClient, or
// nil if no node is there.
func (c *Cluster) handler(addr string) http.Handler {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.Addr == addr {
			return n.srv
		}
	}
	return nil
}

// Client returns the client that carries the nodes' requests with
// HTTPInProcess (HandlerClient over the nodes' addresses), for a test to
// send requests of its own to a node's handler; nil with another
// transport.
func (c *Cluster) Client() *http.Client { return c.client }

// Node returns node id (1-based), or nil.
func (c *Cluster) Node(id uint64) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// Nodes returns every node, by id.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Node, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Running returns the nodes whose journal is open.
func (c *Cluster) Running() []*Node {
	var out []*Node
	for _, n := range c.Nodes() {
		if n.Journal() != nil {
			out = append(out, n)
		}
	}
	return out
}

// Leader returns the running node that considers itself leader and that
// a majority of the voters in its membership follow (itself included), or
// nil. The membership is the one the node applied: after promotions and
// removals, not the roles the nodes were added with.
func (c *Cluster) Leader() *Node {
	running := c.Running()
	js := make(map[uint64]*journal.Journal, len(running))
	for _, n := range running {
		if j := n.Journal(); j != nil {
			js[n.ID] = j
		}
	}
	for _, n := range running {
		j := js[n.ID]
		if j == nil {
			continue
		}
		st := j.Status()
		if !st.IsLeader() || st.Removed {
			continue
		}
		voters, follow := 0, 0
		for _, m := range st.Members {
			if m.Role != journal.Follower {
				continue
			}
			voters++
			if mj := js[m.ID]; mj != nil && mj.Status().Leader == n.ID {
				follow++
			}
		}
		if 2*follow > voters {
			return n
		}
	}
	return nil
}

// WaitLeader waits until Leader is non-nil, woken by the nodes' leadership
// notifications rather than by polling, and returns its id.
func (c *Cluster) WaitLeader(ctx context.Context) (uint64, error) {
	return c.waitFor(ctx, "a leader", func() (uint64, bool) {
		if l := c.Leader(); l != nil {
			return l.ID, true
		}
		return 0, false
	})
}

// WaitNewLeader waits until a node other than old is Leader, and returns
// its id: after cutting off or stopping the leader, WaitLeader could still
// see the old one before the others notice.
func (c *Cluster) WaitNewLeader(ctx context.Context, old uint64) (uint64, error) {
	return c.waitFor(ctx, "a new leader", func() (uint64, bool) {
		if l := c.Leader(); l != nil && l.ID != old {
			return l.ID, true
		}
		return 0, false
	})
}

// WaitApplied waits until every running node has applied index.
func (c *Cluster) WaitApplied(ctx context.Context, index uint64) error {
	var errs []error
	for _, n := range c.Running() {
		if j := n.Journal(); j != nil {
			if err := j.WaitApplied(ctx, index); err != nil && !errors.Is(err, journal.ErrClosed) {
				errs = append(errs, fmt.Errorf("node %d: %w", n.ID, err))
			}
		}
	}
	return errors.Join(errs...)
}

// waitFor re-evaluates cond at every leadership change on any running node
// (and at least every election timeout, for changes that do not notify,
// such as a node restarting), until it holds or ctx ends.
func (c *Cluster) waitFor(ctx context.Context, what string, cond func() (uint64, bool)) (uint64, error) {
	period := c.opts.TickInterval * time.Duration(c.opts.ElectionTicks)
	for {
		// Subscribe before checking, so no change between them is missed.
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}}
		for _, n := range c.Running() {
			if j := n.Journal(); j != nil {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(j.Leadership())})
			}
		}
		if v, ok := cond(); ok {
			return v, nil
		}
		timer := time.NewTimer(period)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)})
		chosen, _, _ := reflect.Select(cases)
		timer.Stop()
		if chosen == 0 {
			return 0, fmt.Errorf("journaltest: waiting for %s: %w", what, context.Cause(ctx))
		}
	}
}

// Stop closes node id's journal cleanly (everything it acknowledged is on
// its disk). Restart brings it back.
func (c *Cluster) Stop(id uint64) error {
	n := c.Node(id)
	if n == nil {
		return fmt.Errorf("journaltest: no node %d", id)
	}
	return c.stop(n)
}

// Crash cuts node id's power: it drops off the network (Network.SetDown)
// and its filesystem keeps only what was synced; then the journal is
// closed. Needs the in-memory
// filesystem (Options.OnDisk false).
func (c *Cluster) Crash(id uint64) error {
	n := c.Node(id)
	if n == nil {
		return fmt.Errorf("journaltest: no node %d", id)
	}
	mem, ok := n.fs.(*vfs.MemFS)
	if !ok {
		return errors.New("journaltest: Crash needs the in-memory filesystem (Options.OnDisk false)")
	}
	if n.Journal() == nil {
		return nil
	}
	// Off the network first, so that it acknowledges nothing after the
	// instant the clone captures; then the clone is what the power cut
	// leaves (synced data only); the clean Close afterwards writes to the
	// old filesystem only.
	c.setDown(n, true)
	n.fs = mem.CrashClone(vfs.CrashCloneCfg{})
	return c.stop(n)
}

// Restart reopens node id from its data dir with a fresh state machine,
// which replays the log. A node not started yet (Options.Unstarted, or
// one whose first start a power cut interrupted) starts as NewCluster
// starts it: node 1 bootstraps, the others join through the
// lowest-numbered running node.
func (c *Cluster) Restart(ctx context.Context, id uint64) error {
	n, err := c.down(id)
	if err != nil {
		return err
	}
	c.setDown(n, false)
	return c.open(ctx, n, n.fs)
}

// RestartCrashingAt is Restart with the power cut right before disk step
// step of the start (counted as CrashFS counts them; 0: no cut), if the
// start gets that far: the node drops off the network at that instant, the
// rest of the start runs on a disk nobody sees again, and the node is down
// afterwards, its disk what the cut left. It then returns an error that
// wraps ErrPowerCut. Needs the in-memory filesystem (Options.OnDisk false).
func (c *Cluster) RestartCrashingAt(ctx context.Context, id uint64, step int) error {
	n, err := c.down(id)
	if err != nil {
		return err
	}
	mem, ok := n.fs.(*vfs.MemFS)
	if !ok {
		return errors.New("journaltest: RestartCrashingAt needs the in-memory filesystem (Options.OnDisk false)")
	}
	n.mu.Lock()
	opened := n.opened
	n.mu.Unlock()
	c.setDown(n, false)
	fs := WrapCrashFS(mem)
	fs.CrashAt(step)
	fs.OnCrash(func() { c.setDown(n, true) })
	err = c.open(ctx, n, fs)
	fs.Disarm() // the cut comes during the start or not at all
	cut := fs.Crashed()
	if cut == nil {
		return err
	}
	if err := c.stop(n); err != nil {
		c.tb.Errorf("journaltest: close node %d after its power cut: %v", id, err)
	}
	// What the start wrote is gone: whether it completed is as before.
	n.mu.Lock()
	n.fs, n.opened = cut, opened
	n.mu.Unlock()
	return fmt.Errorf("journaltest: node %d, disk step %d: %w", id, step, ErrPowerCut)
}

// ErrPowerCut is what RestartCrashingAt returns when its power cut came.
var ErrPowerCut = errors.New("journaltest: power cut during the start")

// down returns node id if it exists and is not running.
func (c *Cluster) down(id uint64) (*Node, error) {
	n := c.Node(id)
	if n == nil {
		return nil, fmt.Errorf("journaltest: no node %d", id)
	}
	if n.Journal() != nil {
		return nil, fmt.Errorf("journaltest: node %d is running", id)
	}
	return n, nil
}

// Close closes every node, then their loopback servers. It is idempotent
// and runs at t.Cleanup.
func (c *Cluster) Close() {
	for _, n := range c.Nodes() {
		if err := c.Stop(n.ID); err != nil {
			c.tb.Errorf("journaltest: close node %d: %v", n.ID, err)
		}
	}
	for _, n := range c.Nodes() {
		n.srv.close()
	}
}
