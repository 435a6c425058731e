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

// imageHosts runs beside every node of a journaltest.Cluster (its
// Options.Host) an image store and a checkpointer as the examples wire
// them (examples/frontend), each on the run's disk, its images served in
// process (journaltest.HandlerClient), so that the cluster runs in a
// synctest bubble.
type imageHosts struct {
	client *http.Client

	mu       sync.Mutex
	images   map[string]http.Handler // each running node's image handler, by address
	runs     map[uint64]*imageHost   // each node's current (or last) run
	written  int                     // images written or adopted by the runs that ended
	installs atomic.Int64            // snapshots installed (raft snapshots taken)
}

// newFaultCluster adds nodes 1 to voters as voters and the next observers
// nodes as observers, each with its imageHosts run on a crashable
// in-memory disk, on a network seeded with seed. No node starts with the
// cluster: they start while faults are already injected, so a power cut
// can hit any step of a bootstrap, a join or a restart
// (journaltest.Cluster.RestartCrashingAt).
func newFaultCluster(t *testing.T, seed uint64, voters, observers int) (*journaltest.Cluster, *imageHosts) {
	h := &imageHosts{images: map[string]http.Handler{}, runs: map[uint64]*imageHost{}}
	h.client = journaltest.HandlerClient(func(host string) http.Handler {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.images[host]
	})
	c := journaltest.NewCluster(t, journaltest.Options{
		Voters: voters, Observers: observers, Seed: seed, Unstarted: true,
		NewStateMachine: func(uint64) journal.StateMachine { return newKVSM() },
		Configure: func(cfg *journal.Config) {
			cfg.StaleAfter = time.Minute
			cfg.CompactMargin, cfg.DedupeWindow = faultDedupeWindow, faultDedupeWindow
		},
		Host: h.host,
	})
	return c, h
}

// kvOf returns node n's state machine of its current (or last) run, or
// nil before its first start.
func kvOf(n *journaltest.Node) *kvSM {
	sm, _ := n.StateMachine().(*kvSM)
	return sm
}

// imageHost is one run's image store and checkpointer, wired as the
// frontend wires them.
type imageHost struct {
	hosts *imageHosts
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
func (hs *imageHosts) host(ctx context.Context, id uint64, cfg *journal.Config) (journaltest.Host, error) {
	h := &imageHost{hosts: hs, id: id, ctx: ctx, reqc: make(chan struct{}, 1), stop: make(chan struct{})}
	sm := cfg.StateMachine.(*kvSM)
	store, err := image.Open(image.Config{Dir: cfg.Dir, FS: cfg.FS, State: sm, HTTPClient: hs.client})
	if err != nil {
		return nil, err
	}
	h.store = store
	cfg.Snapshots = snapshots{store, h.reqc, &hs.installs}
	hs.mu.Lock()
	hs.images[cfg.Addr] = store.Handler()
	hs.runs[id] = h
	hs.mu.Unlock()
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
	h.hosts.mu.Lock()
	h.cp = cp
	h.hosts.mu.Unlock()
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
	h.hosts.mu.Lock()
	cp := h.cp
	h.cp = nil
	h.hosts.mu.Unlock()
	if cp == nil {
		return nil
	}
	close(h.stop)
	h.wg.Wait()
	h.hosts.mu.Lock()
	h.hosts.written += cp.Status().Written
	h.hosts.mu.Unlock()
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
func (hs *imageHosts) imagesWritten() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	total := hs.written
	for _, h := range hs.runs {
		if h.cp != nil {
			total += h.cp.Status().Written
		}
	}
	return total
}
