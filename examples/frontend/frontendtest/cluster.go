package frontendtest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
	"github.com/stretchr/testify/require"
)

// Options configure a Cluster.
type Options struct {
	// Frontends is the number of voting frontends; default 3.
	Frontends int
	// Observers is the number of frontends that join after the voters as
	// observers (journal.Observer), with the indexes after theirs.
	Observers int
	// Workers is the number of workers started with the cluster
	// (Cluster.AddWorker), with the ids after the frontends'.
	Workers int
	// Config is the template of every frontend's config; ID, Dir, Addr,
	// Bootstrap, Join, Listener and Dial are set per frontend (and FS with
	// InMemory), and Token defaults to "frontendtest".
	Config frontend.Config
	// InMemory runs every frontend on its own in-memory filesystem that
	// loses what was not synced at a power cut (journaltest.CrashFS), its
	// data dir "/frontend-i", instead of a dir under t.TempDir: Crash
	// needs it.
	InMemory bool
	// DiskFree, with InMemory, is the free space each frontend's
	// filesystem reports from the start (journaltest.CrashFS.SetFree), so
	// that the journal's free-space guard runs and a test can fill the
	// disk (Cluster.FS); 0 reports none, and the guard is off.
	DiskFree int64
	// Clock, when set, returns the clock a member runs on as it starts
	// (frontend.Config.Clock for frontend i, the heartbeat responder's for
	// worker i); nil, or a nil result, is the real clock.
	Clock func(i uint64) journal.Clock
	// Start, when set, starts each frontend in place of frontend.Start
	// with the config the cluster built for it: a host that mounts its own
	// API (Config.Handler) on the frontend, as the metaserver does, runs
	// its assembly here.
	Start func(context.Context, frontend.Config) (*frontend.Frontend, error)
}

// Cluster is a cluster of frontends (voters, then observers), the production assembly
// (frontend.Start), talking over one in-memory Network. Frontend i (from
// 1) has the address "frontend-i:7000" and a data dir under t.TempDir.
// The cluster closes when the test ends.
type Cluster struct {
	t    testing.TB
	net  *Network
	opts Options
	root string

	mu  sync.Mutex
	fes map[int]*frontend.Frontend
	// workers holds every worker added, nil while it is stopped.
	workers map[uint64]*Worker
	fss     map[int]*journaltest.CrashFS // with InMemory: each frontend's filesystem
	// joined holds the frontends JoinFrontend started, with the role each
	// joined with (a restart starts with it, as a metaserver restarted
	// with its command line does).
	joined map[int]journal.Role
}

// NewCluster starts the cluster: frontend 1 bootstraps and the others
// join through it, one at a time; then the workers start.
func NewCluster(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Frontends == 0 {
		opts.Frontends = 3
	}
	if opts.Config.Token == "" {
		opts.Config.Token = "frontendtest"
	}
	c := &Cluster{t: t, net: NewNetwork(), opts: opts, fes: map[int]*frontend.Frontend{}, workers: map[uint64]*Worker{}, fss: map[int]*journaltest.CrashFS{}, joined: map[int]journal.Role{}}
	if !opts.InMemory {
		c.root = t.TempDir()
	}
	t.Cleanup(c.close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 1; i <= opts.Frontends+opts.Observers; i++ {
		join := ""
		if i > 1 {
			join = Addr(1)
		}
		_, err := c.start(ctx, i, i == 1, join)
		require.NoError(t, err, "start frontend %d", i)
	}
	for k := 1; k <= opts.Workers; k++ {
		id := uint64(c.frontends() + k)
		_, err := c.AddWorker(ctx, id)
		require.NoError(t, err, "start worker %d", id)
	}
	return c
}

// frontends is the number of frontends, voters and observers.
func (c *Cluster) frontends() int { return c.opts.Frontends + c.opts.Observers }

// Addr is frontend i's address.
func Addr(i int) string { return fmt.Sprintf("frontend-%d:7000", i) }

// Network is the cluster's network.
func (c *Cluster) Network() *Network { return c.net }

func (c *Cluster) start(ctx context.Context, i int, bootstrap bool, join string) (*frontend.Frontend, error) {
	return c.startWith(ctx, i, bootstrap, join, nil)
}

// startWith starts frontend i as start does, with adjust (when set)
// applied last to its config (a forced recovery's flag, say).
func (c *Cluster) startWith(ctx context.Context, i int, bootstrap bool, join string, adjust func(*frontend.Config)) (*frontend.Frontend, error) {
	cfg := c.opts.Config
	cfg.ID, cfg.Addr = uint64(i), Addr(i)
	cfg.Dir = filepath.Join(c.root, fmt.Sprint(i))
	if c.opts.InMemory {
		fs, err := c.memFS(i)
		if err != nil {
			return nil, err
		}
		cfg.FS, cfg.Dir = fs, memDir(i)
	}
	cfg.Bootstrap, cfg.Join = bootstrap, join
	cfg.Clock = c.clock(uint64(i))
	// An observer starts with the role it joined with, as a metaserver
	// restarted with its command line does; a restart takes the role its
	// data dir holds (a promotion may have made it a voter since).
	c.mu.Lock()
	role, joined := c.joined[i]
	c.mu.Unlock()
	switch {
	case joined:
		cfg.Role = role
	case i > c.opts.Frontends:
		cfg.Role = journal.Observer
	}
	ln, err := c.net.Listen(cfg.Addr)
	if err != nil {
		return nil, err
	}
	cfg.Listener = ln
	cfg.Dial = func(ctx context.Context, _, to string) (net.Conn, error) { return c.net.Dial(ctx, cfg.Addr, to) }
	if adjust != nil {
		adjust(&cfg)
	}
	start := frontend.Start
	if c.opts.Start != nil {
		start = c.opts.Start
	}
	f, err := start(ctx, cfg)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	c.mu.Lock()
	c.fes[i] = f
	c.mu.Unlock()
	return f, nil
}

// clock returns the clock member i starts on (Options.Clock), or nil.
func (c *Cluster) clock(i uint64) journal.Clock {
	if c.opts.Clock == nil {
		return nil
	}
	return c.opts.Clock(i)
}

// Frontend is frontend i, or nil while it is stopped.
func (c *Cluster) Frontend(i int) *frontend.Frontend {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fes[i]
}

// Leader waits until every running frontend follows one leader that
// considers itself leader, and returns its index.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	for {
		c.mu.Lock()
		var chans []<-chan struct{}
		leader, agreed := uint64(0), true
		for _, f := range c.fes {
			chans = append(chans, f.Journal().Leadership())
			st := f.Journal().Status()
			if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
				agreed = false
			}
			leader = st.Leader
		}
		lf := c.fes[int(leader)]
		c.mu.Unlock()
		if agreed && lf != nil && lf.Journal().Status().IsLeader() {
			return int(leader), nil
		}
		// Wake on any leadership change; re-check on a tick in case a
		// follower learns the leader without a change of its own.
		tick := time.NewTimer(100 * time.Millisecond)
		cases := []reflect.SelectCase{
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(tick.C)},
		}
		for _, ch := range chans {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
		}
		chosen, _, _ := reflect.Select(cases)
		tick.Stop()
		if chosen == 0 {
			return 0, fmt.Errorf("frontendtest: no agreed leader: %w", ctx.Err())
		}
	}
}

// Partition cuts frontend a off from each of others (both directions).
func (c *Cluster) Partition(a int, others ...int) {
	addrs := make([]string, len(others))
	for k, o := range others {
		addrs[k] = Addr(o)
	}
	c.net.Partition(Addr(a), addrs...)
}

// Heal restores every link a partition cut.
func (c *Cluster) Heal() { c.net.Heal() }

// StopFrontend closes frontend i, keeping its data dir.
func (c *Cluster) StopFrontend(i int) {
	c.mu.Lock()
	f := c.fes[i]
	delete(c.fes, i)
	c.mu.Unlock()
	if f != nil {
		_ = f.Close()
	}
}

// RestartFrontend stops frontend i (if running) and starts it again from
// its data dir.
func (c *Cluster) RestartFrontend(ctx context.Context, i int) (*frontend.Frontend, error) {
	c.StopFrontend(i)
	return c.start(ctx, i, false, "")
}

func (c *Cluster) close() {
	c.closeWorkers()
	c.mu.Lock()
	fes := c.fes
	c.fes = map[int]*frontend.Frontend{}
	c.mu.Unlock()
	for _, f := range fes {
		_ = f.Close()
	}
	c.net.Close()
}
