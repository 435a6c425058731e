package image

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
	"github.com/stretchr/testify/require"
)

var (
	_ Snapshots         = (*Store)(nil)
	_ journal.Snapshots = (*Store)(nil)
	_ Journal           = (*journal.ImageLog)(nil)
	_ State             = (*catalog.Tree)(nil)
)

// imageNet serves every node's image Handler on real loopback HTTP and
// routes the journaltest addresses ("node1") to them.
type imageNet struct {
	mu      sync.Mutex
	servers map[string]*httptest.Server
}

func (n *imageNet) serve(addr string, s *Store) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if old := n.servers[addr]; old != nil {
		old.Close()
	}
	n.servers[addr] = httptest.NewServer(s.Handler())
}

func (n *imageNet) client() *http.Client {
	base := &http.Transport{}
	return &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		n.mu.Lock()
		srv := n.servers[r.URL.Host]
		n.mu.Unlock()
		if srv != nil {
			r = r.Clone(r.Context())
			r.URL.Host = strings.TrimPrefix(srv.URL, "http://")
		}
		return base.RoundTrip(r)
	})}
}

func (n *imageNet) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.servers {
		s.Close()
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// imageCluster is a journaltest cluster of catalog nodes wired to image
// stores and checkpointers as a host wires them.
type imageCluster struct {
	*journaltest.Cluster
	t      *testing.T
	mu     sync.Mutex
	trees  map[uint64]*catalog.Tree
	stores map[uint64]*Store
	cps    map[uint64]*Checkpointer
	lastFS map[uint64]vfs.FS
}

func newImageCluster(t *testing.T, configure ...func(*journal.Config)) *imageCluster {
	c := &imageCluster{t: t, trees: map[uint64]*catalog.Tree{}, stores: map[uint64]*Store{}, cps: map[uint64]*Checkpointer{}, lastFS: map[uint64]vfs.FS{}}
	inet := &imageNet{servers: map[string]*httptest.Server{}}
	client := inet.client()
	mu := &c.mu
	t.Cleanup(func() { // runs after the cluster's Close
		for _, s := range c.stores {
			s.Close()
		}
		inet.close()
		client.CloseIdleConnections()
	})
	c.Cluster = journaltest.NewCluster(t, journaltest.Options{
		NewStateMachine: func(id uint64) journal.StateMachine {
			mu.Lock()
			defer mu.Unlock()
			tr := catalog.New()
			c.trees[id] = tr
			return tr
		},
		Configure: func(cfg *journal.Config) {
			mu.Lock()
			defer mu.Unlock()
			s, err := Open(Config{Dir: cfg.Dir, FS: cfg.FS, State: c.trees[cfg.ID], HTTPClient: client,
				Logger: testLogger(t).With("node", cfg.ID)})
			require.NoError(t, err)
			c.stores[cfg.ID] = s
			c.lastFS[cfg.ID] = cfg.FS
			inet.serve(cfg.Addr, s)
			cfg.Snapshots = s
			cfg.DedupeWindow, cfg.CompactMargin = 10, 10
			for _, f := range configure {
				f(cfg)
			}
		},
	})
	for _, n := range c.Nodes() {
		c.startCheckpointer(n.ID)
	}
	return c
}

func (c *imageCluster) startCheckpointer(id uint64, opts ...func(*CheckpointerConfig)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.Node(id).Journal()
	require.NoError(c.t, c.stores[id].SetClusterID(j.Status().ClusterID))
	cfg := CheckpointerConfig{
		Store: c.stores[id], Journal: journal.ImageLogOf(j),
		Applied:  func() uint64 { return j.Status().Applied },
		NewState: func() State { return catalog.New() },
		Interval: time.Hour, Logger: testLogger(c.t).With("node", id),
	}
	for _, o := range opts {
		o(&cfg)
	}
	cp, err := NewCheckpointer(cfg)
	require.NoError(c.t, err)
	c.cps[id] = cp
	c.t.Cleanup(func() { cp.Close() })
}

// crash closes node id's checkpointer, journal and store; with power loss
// only what was synced survives, as when a machine dies; without, as a
// process that exits.
func (c *imageCluster) crash(id uint64, powerLoss bool) {
	c.mu.Lock()
	cp, s := c.cps[id], c.stores[id]
	c.mu.Unlock()
	require.NoError(c.t, cp.Close())
	if powerLoss {
		require.NoError(c.t, c.Crash(id))
	} else {
		require.NoError(c.t, c.Stop(id))
	}
	require.NoError(c.t, s.Close())
}

func (c *imageCluster) store(id uint64) *Store {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stores[id]
}

func (c *imageCluster) tree(id uint64) *catalog.Tree {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trees[id]
}

// leaderAndFollower waits for c's leader and picks a follower of it, under
// a context that bounds the test to a minute.
func (c *imageCluster) leaderAndFollower() (ctx context.Context, leaderID uint64, leader *journal.Journal, follower uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	c.t.Cleanup(cancel)
	leaderID, err := c.WaitLeader(ctx)
	require.NoError(c.t, err)
	follower = 1
	for follower == leaderID {
		follower++
	}
	return ctx, leaderID, c.Node(leaderID).Journal(), follower
}

// A follower partitioned while the leader writes, checkpoints and compacts
// past it catches up through an image once the partition heals, and its
// catalog saves byte-identical to the leader's.
func TestPartitionedFollowerCatchesUpThroughImage(t *testing.T) {
	c := newImageCluster(t)
	ctx, leaderID, leader, lagger := c.leaderAndFollower()
	var err error

	batches := catalogBatches(t, 300)
	var last uint64
	for _, b := range batches[:50] {
		last, _, err = leader.Propose(ctx, b)
		require.NoError(t, err)
	}
	require.NoError(t, c.WaitApplied(ctx, last))

	// Two checkpoints: the second compacts the log up to the first.
	c.Net.Isolate(lagger)
	for _, part := range [][][]byte{batches[50:150], batches[150:]} {
		for _, b := range part {
			last, _, err = leader.Propose(ctx, b)
			require.NoError(t, err)
		}
		for _, n := range c.Nodes() {
			if n.ID == lagger {
				continue
			}
			require.NoError(t, n.Journal().WaitApplied(ctx, last))
			info, err := c.cps[n.ID].Checkpoint(ctx)
			require.NoError(t, err)
			require.GreaterOrEqual(t, info.Index, last)
		}
	}
	behind := c.Node(lagger).Journal().Status().Applied
	require.Less(t, behind+10, last, "the follower is further behind than the compaction margin")
	err = leader.ReadEntries(ctx, behind, last, func(uint64, []byte) error { return nil })
	require.Error(t, err, "the leader compacted the entries the follower needs")

	c.Net.Heal()
	lj := c.Node(lagger).Journal()
	require.NoError(t, lj.WaitApplied(ctx, last))
	ids, err := c.stores[lagger].Indexes()
	require.NoError(t, err)
	require.NotEmpty(t, ids, "the follower caught up through an image")

	// No user entry follows last, so both catalogs are final: the same,
	// byte for byte.
	require.Equal(t, saveBytes(t, c.trees[leaderID]), saveBytes(t, c.trees[lagger]))
	require.Equal(t, c.trees[leaderID].Len(), c.trees[lagger].Len())

	// Power loss right after: the node restarts from the restored image.
	c.crash(lagger, true)
	require.NoError(t, c.Restart(ctx, lagger))
	c.startCheckpointer(lagger)
	require.NoError(t, c.Node(lagger).Journal().WaitApplied(ctx, last))
	require.Equal(t, saveBytes(t, c.tree(leaderID)), saveBytes(t, c.tree(lagger)))
}

// A node whose log was compacted behind its image refuses to start, naming
// the problem, when that image is gone: it never starts silently empty.
func TestNodeWithoutItsImageRefusesToStart(t *testing.T) {
	c := newImageCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leaderID, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	leader := c.Node(leaderID).Journal()
	// Two checkpoints: the second compacts the log up to the first.
	batches := catalogBatches(t, 120)
	var victim uint64 = 1
	if victim == leaderID {
		victim = 2
	}
	var last uint64
	var names []string
	for _, part := range [][][]byte{batches[:100], batches[100:]} {
		for _, b := range part {
			last, _, err = leader.Propose(ctx, b)
			require.NoError(t, err)
		}
		require.NoError(t, c.Node(victim).Journal().WaitApplied(ctx, last))
		info, err := c.cps[victim].Checkpoint(ctx)
		require.NoError(t, err)
		names = append(names, info.Name)
	}
	first, err := c.Node(victim).Journal().FirstIndex()
	require.NoError(t, err)
	require.Greater(t, first, uint64(1), "the log was compacted behind the first image")
	err = c.Node(victim).Journal().ReadEntries(ctx, 0, last, func(uint64, []byte) error { return nil })
	require.ErrorIs(t, err, journal.ErrCompacted)

	c.crash(victim, false)
	fs := c.lastFS[victim]
	dir := c.store(victim).Dir()
	for _, name := range names {
		require.NoError(t, fs.Remove(fs.PathJoin(dir, name)))
	}
	err = c.Restart(ctx, victim)
	require.ErrorIs(t, err, ErrNoUsableImage)
	require.Contains(t, err.Error(), dir)
	require.Contains(t, err.Error(), "restore this node from a peer")
}

// The leader, which may not checkpoint by shadow replay, adopts a
// follower's image through the real journal: peers found from the journal's
// members (as the frontend wires it), the image recorded as raft's snapshot
// and, once a second one is adopted, the leader's log compacted up to the
// first; after a power loss the leader
// starts from the adopted image.
func TestLeaderAdoptsFollowerImage(t *testing.T) {
	c := newImageCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leaderID, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	lj := c.Node(leaderID).Journal()

	// The leader's Checkpointer as a host wires it, on a clock the test
	// drives. (Enabled is false throughout, not !IsLeader, so that an
	// election under load does not turn this into a shadow replay.)
	require.NoError(t, c.cps[leaderID].Close())
	clock := newFakeClock()
	ticks := make(chan tickResult, 1)
	c.startCheckpointer(leaderID, func(cfg *CheckpointerConfig) {
		cfg.Enabled = func() bool { return false }
		cfg.Peers = func() []string {
			var addrs []string
			for _, m := range lj.Status().Members {
				if m.ID != leaderID {
					addrs = append(addrs, m.Addr)
				}
			}
			return addrs
		}
		cfg.Threshold, cfg.Clock = 50, clock
		cfg.testingKnobs.afterTick = func(ran bool, info Info, err error) { ticks <- tickResult{ran, info, err} }
	})

	// Two rounds: the second adopted image compacts the leader's log up to
	// the first.
	var follower uint64
	for _, n := range c.Nodes() {
		if n.ID != leaderID {
			follower = n.ID // one follower's images are enough
			break
		}
	}
	batches := catalogBatches(t, 200)
	var last uint64
	var fis []Info
	for round, part := range [][][]byte{batches[:120], batches[120:]} {
		for _, b := range part {
			last, _, err = lj.Propose(ctx, b)
			require.NoError(t, err)
		}
		require.NoError(t, c.WaitApplied(ctx, last))
		fi, err := c.cps[follower].Checkpoint(ctx)
		require.NoError(t, err)
		fis = append(fis, fi)
		require.NoError(t, lj.WaitApplied(ctx, fi.Index))

		clock.tick(time.Minute)
		r := <-ticks
		require.NoError(t, r.err)
		require.True(t, r.ran)
		require.Equal(t, fi.Index, r.info.Index)
		st := c.cps[leaderID].Status()
		require.Equal(t, round+1, st.Adopted)
		require.Equal(t, c.Node(follower).Addr, st.LastSource)
		require.Equal(t, fi.Index, lj.Status().Image, "the journal recorded the adopted image")
	}
	first, err := lj.FirstIndex()
	require.NoError(t, err)
	require.Equal(t, fis[0].Index+1, first, "the leader's log starts after the first adopted image")
	err = lj.ReadEntries(ctx, 0, fis[0].Index, func(uint64, []byte) error { return nil })
	require.ErrorIs(t, err, journal.ErrCompacted, "and is compacted behind it")
	fi := fis[1]
	leaderFS, followerFS := c.lastFS[leaderID], c.lastFS[follower]
	require.Equal(t,
		readAll(t, followerFS, followerFS.PathJoin(c.store(follower).Dir(), fi.Name)),
		readAll(t, leaderFS, leaderFS.PathJoin(c.store(leaderID).Dir(), fi.Name)))

	// Power loss on the (former) leader: it starts from the adopted image
	// and ends with the same catalog, byte for byte.
	c.crash(leaderID, true)
	require.NoError(t, c.Restart(ctx, leaderID))
	c.startCheckpointer(leaderID)
	require.NoError(t, c.Node(leaderID).Journal().WaitApplied(ctx, last))
	require.Equal(t, saveBytes(t, c.tree(follower)), saveBytes(t, c.tree(leaderID)))
}

// A follower isolated while the leader checkpoints and compacts past it,
// healed onto lossy links while the leader keeps writing and the follower
// keeps checkpointing, installs the leader's image and applies past it.
func TestIsolatedFollowerInstallsImageUnderWrites(t *testing.T) {
	c := newImageCluster(t)
	ctx, leaderID, leader, lagger := c.leaderAndFollower()
	batches := catalogBatches(t, 2000)
	next := 0
	prop := func() uint64 {
		idx, _, err := leader.Propose(ctx, batches[next%len(batches)])
		require.NoError(t, err)
		next++
		return idx
	}
	for range 50 {
		prop()
	}
	c.Net.Isolate(lagger)
	var last uint64
	for range 200 {
		last = prop()
	}
	var image uint64
	for _, n := range c.Nodes() {
		if n.ID == lagger {
			continue
		}
		require.NoError(t, n.Journal().WaitApplied(ctx, last))
		info, err := c.cps[n.ID].Checkpoint(ctx)
		require.NoError(t, err)
		if n.ID == leaderID {
			image = info.Index
		}
	}
	stop := make(chan struct{})
	done := repeatUntil(stop, func() {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, _, _ = leader.Propose(pctx, batches[next%len(batches)])
		pcancel()
		next++
	})
	c.Net.Heal()
	c.Net.Drop(leaderID, lagger, 0.3)
	c.Net.Drop(lagger, leaderID, 0.3)
	c.Net.Delay(leaderID, lagger, time.Millisecond, 5*time.Millisecond)
	cpDone := repeatUntil(stop, func() {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = c.cps[lagger].Checkpoint(cctx)
		ccancel()
		time.Sleep(time.Millisecond)
	})
	lj := c.Node(lagger).Journal()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := lj.Status()
		if st.Image >= image && st.Applied >= image {
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			<-done
			<-cpDone
			t.Fatalf("follower stuck: %+v (image %d)", st, image)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	<-done
	<-cpDone
}

// repeatUntil calls fn on a goroutine of its own, again and again, until
// stop closes; the channel it returns closes once that goroutine returned.
func repeatUntil(stop <-chan struct{}, fn func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			fn()
		}
	}()
	return done
}
