package image

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
	"github.com/stretchr/testify/require"
)

var (
	_ Snapshots         = (*Store)(nil)
	_ journal.Snapshots = (*Store)(nil)
	_ Journal           = (*journal.Journal)(nil)
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
	trees  map[uint64]*catalog.Tree
	stores map[uint64]*Store
	cps    map[uint64]*Checkpointer
}

func newImageCluster(t *testing.T) *imageCluster {
	c := &imageCluster{trees: map[uint64]*catalog.Tree{}, stores: map[uint64]*Store{}, cps: map[uint64]*Checkpointer{}}
	inet := &imageNet{servers: map[string]*httptest.Server{}}
	client := inet.client()
	var mu sync.Mutex
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
			inet.serve(cfg.Addr, s)
			cfg.Snapshots = s
			cfg.DedupeWindow, cfg.CompactMargin = 10, 10
		},
	})
	for _, n := range c.Nodes() {
		j := n.Journal()
		require.NoError(t, c.stores[n.ID].SetClusterID(j.Status().ClusterID))
		cp, err := NewCheckpointer(CheckpointerConfig{
			Store: c.stores[n.ID], Journal: j,
			Applied:  func() uint64 { return j.Status().Applied },
			NewState: func() State { return catalog.New() },
			Interval: time.Hour, Logger: testLogger(t).With("node", n.ID),
		})
		require.NoError(t, err)
		c.cps[n.ID] = cp
		t.Cleanup(func() { cp.Close() })
	}
	return c
}

// A follower partitioned while the leader writes, checkpoints and compacts
// past it catches up through an image once the partition heals, and its
// catalog saves byte-identical to the leader's.
func TestPartitionedFollowerCatchesUpThroughImage(t *testing.T) {
	c := newImageCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leaderID, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	leader := c.Node(leaderID).Journal()
	var lagger uint64 = 1
	for lagger == leaderID {
		lagger++
	}

	batches := catalogBatches(t, 300)
	var last uint64
	for _, b := range batches[:50] {
		last, _, err = leader.Propose(ctx, b)
		require.NoError(t, err)
	}
	require.NoError(t, c.WaitApplied(ctx, last))

	c.Net.Isolate(lagger)
	for _, b := range batches[50:] {
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
}
