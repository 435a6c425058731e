package journal_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// faultDedupeWindow is the nodes' dedupe window and compaction margin:
// small, so that images, compaction and snapshot installs happen
// throughout the run.
const faultDedupeWindow = 20

// faultCluster is a journaltest.Cluster whose nodes run image stores and
// checkpointers as the examples wire them (examples/frontend), each
// node on a crashable in-memory disk, its images served in process
// (journaltest.HandlerClient), so that it runs in a synctest bubble. No node
// starts with the cluster: they start while faults are already injected,
// so a power cut can hit any step of a bootstrap, a join or a restart
// (journaltest.Cluster.RestartCrashingAt).
type faultCluster struct {
	*journaltest.Cluster
	client *http.Client

	mu       sync.Mutex
	images   map[string]http.Handler // each running node's image handler, by address
	runs     map[uint64]*imageHost   // each node's current (or last) run
	written  int                     // images written or adopted by the runs that ended
	installs atomic.Int64            // snapshots installed (raft snapshots taken)
}

// newFaultCluster adds nodes 1 to voters as voters and the next observers
// nodes as observers, none started, on a network seeded with seed.
func newFaultCluster(t *testing.T, seed uint64, voters, observers int) *faultCluster {
	c := &faultCluster{images: map[string]http.Handler{}, runs: map[uint64]*imageHost{}}
	c.client = journaltest.HandlerClient(func(host string) http.Handler {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.images[host]
	})
	c.Cluster = journaltest.NewCluster(t, journaltest.Options{
		Voters: voters, Observers: observers, Seed: seed, Unstarted: true,
		NewStateMachine: func(uint64) journal.StateMachine { return newKVSM() },
		Configure: func(cfg *journal.Config) {
			cfg.StaleAfter = time.Minute
			cfg.CompactMargin, cfg.DedupeWindow = faultDedupeWindow, faultDedupeWindow
		},
		Host: c.host,
	})
	return c
}

// sm returns node id's state machine of its current (or last) run, or
// nil before its first start.
func (c *faultCluster) sm(id uint64) *kvSM {
	sm, _ := c.Node(id).StateMachine().(*kvSM)
	return sm
}

// imageHost is one run's image store and checkpointer, wired as the
// frontend wires them.
type imageHost struct {
	c     *faultCluster
	id    uint64
	ctx   context.Context
	store *image.Store
	cp    *image.Checkpointer
	reqc  chan struct{} // checkpoints on demand (journal.ImageRequester)
	stop  chan struct{}
	wg    sync.WaitGroup
}

// host opens node id's image store on the run's disk and makes it the
// journal's Snapshots.
func (c *faultCluster) host(ctx context.Context, id uint64, cfg *journal.Config) (journaltest.Host, error) {
	h := &imageHost{c: c, id: id, ctx: ctx, reqc: make(chan struct{}, 1), stop: make(chan struct{})}
	sm := cfg.StateMachine.(*kvSM)
	store, err := image.Open(image.Config{Dir: cfg.Dir, FS: cfg.FS, State: sm, HTTPClient: c.client})
	if err != nil {
		return nil, err
	}
	h.store = store
	cfg.Snapshots = snapshots{store, h.reqc, &c.installs}
	c.mu.Lock()
	c.images[cfg.Addr] = store.Handler()
	c.runs[id] = h
	c.mu.Unlock()
	return h, nil
}

// Started starts the checkpointer and its on-demand loop.
func (h *imageHost) Started(ctx context.Context, j *journal.Journal) error {
	if err := h.store.SetClusterID(j.Status().ClusterID); err != nil {
		return err
	}
	cp, err := image.NewCheckpointer(image.CheckpointerConfig{
		Store: h.store, Journal: journal.ImageLogOf(j),
		Applied:   func() uint64 { return j.Status().Applied },
		NewState:  func() image.State { return newKVSM() },
		Threshold: 15, Interval: 20 * time.Millisecond,
		Enabled: func() bool { return !j.Status().IsLeader() },
		Peers: func() []string {
			var addrs []string
			for _, m := range j.Status().Members {
				if m.ID != h.id {
					addrs = append(addrs, m.Addr)
				}
			}
			return addrs
		},
	})
	if err != nil {
		return err
	}
	h.c.mu.Lock()
	h.cp = cp
	h.c.mu.Unlock()
	h.wg.Go(func() {
		for {
			select {
			case <-h.stop:
				return
			case <-h.reqc:
				cctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
				_, _ = cp.Checkpoint(cctx)
				cancel()
			}
		}
	})
	return nil
}

// Stop ends the on-demand loop and closes the checkpointer, counting the
// images it wrote.
func (h *imageHost) Stop() error {
	h.c.mu.Lock()
	cp := h.cp
	h.cp = nil
	h.c.mu.Unlock()
	if cp == nil {
		return nil
	}
	close(h.stop)
	h.wg.Wait()
	h.c.mu.Lock()
	h.c.written += cp.Status().Written
	h.c.mu.Unlock()
	return cp.Close()
}

// Close closes the image store.
func (h *imageHost) Close() error {
	return errors.Join(h.Stop(), h.store.Close())
}

// snapshots is the journal's image hook: the store, plus a checkpoint on
// demand, as the frontend wires it.
type snapshots struct {
	*image.Store
	reqc     chan struct{}
	installs *atomic.Int64
}

func (s snapshots) Install(ctx context.Context, index uint64) error {
	s.installs.Add(1)
	return s.Store.Install(ctx, index)
}

func (s snapshots) RequestImage() {
	select {
	case s.reqc <- struct{}{}:
	default:
	}
}

// imagesWritten counts the images written or adopted so far, by every
// run of every node.
func (c *faultCluster) imagesWritten() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := c.written
	for _, h := range c.runs {
		if h.cp != nil {
			total += h.cp.Status().Written
		}
	}
	return total
}
