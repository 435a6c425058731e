package journal_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// faultDedupeWindow is the nodes' dedupe window and compaction margin:
// small, so that images, compaction and snapshot installs happen
// throughout the run.
const faultDedupeWindow = 20

// faultCluster is a cluster of journal nodes wired to image stores and
// checkpointers as the examples wire them (examples/frontend),
// on a journaltest network, each node on a crashable in-memory disk, its
// images served in process (HandlerClientForTest), so that it runs in a synctest
// bubble. Nodes
// join while faults are already injected: a power cut can hit any step of
// a bootstrap, a join or a restart (journaltest.CrashFS).
type faultCluster struct {
	t      *testing.T
	net    *journaltest.Network
	client *http.Client

	mu       sync.Mutex
	nodes    map[uint64]*faultNode
	images   map[string]http.Handler // each running node's image handler, by address
	written  int                     // images written or adopted, over every incarnation
	installs atomic.Int64            // snapshots installed (raft snapshots taken)
}

// faultNode is one node; its fields change only under faultCluster.mu
// except run, which clients read through journal().
type faultNode struct {
	id   uint64
	addr string
	role journal.Role
	disk *vfs.MemFS // what survives a power cut (replaced by its crash clone)

	mu  sync.Mutex
	run *faultRun // nil while down
}

// faultRun is one incarnation of a node.
type faultRun struct {
	j     *journal.Journal
	sm    *kvSM
	store *image.Store
	cp    *image.Checkpointer
	reqc  chan struct{} // checkpoints on demand (journal.ImageRequester)
	stop  chan struct{}
	wg    sync.WaitGroup
}

func newFaultCluster(t *testing.T, seed uint64) *faultCluster {
	c := &faultCluster{t: t, net: journaltest.NewNetwork(seed), nodes: map[uint64]*faultNode{}, images: map[string]http.Handler{}}
	c.client = journal.HandlerClientForTest(func(host string) http.Handler {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.images[host]
	})
	t.Cleanup(func() {
		for _, n := range c.all() {
			c.stop(n)
		}
	})
	return c
}

func (c *faultCluster) add(id uint64, role journal.Role) *faultNode {
	n := &faultNode{id: id, addr: fmt.Sprintf("node%d", id), role: role, disk: vfs.NewCrashableMem()}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return n
}

func (c *faultCluster) node(id uint64) *faultNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

func (c *faultCluster) all() []*faultNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*faultNode, 0, len(c.nodes))
	for id := uint64(1); id <= uint64(len(c.nodes)); id++ {
		out = append(out, c.nodes[id])
	}
	return out
}

// journal returns the node's running journal, or nil while it is down.
func (n *faultNode) journal() *journal.Journal {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.run == nil {
		return nil
	}
	return n.run.j
}

func (n *faultNode) sm() *kvSM {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.run == nil {
		return nil
	}
	return n.run.sm
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

// start opens node n: it bootstraps (node 1) or joins (the others) while
// its dir has no VERSION, else restarts. With crashAt > 0 the power is cut
// right before that disk step of Open, if Open gets that far: the node
// drops off the network at that instant, the rest of Open runs on a disk
// nobody will see again, and the node is down afterwards, its disk the
// cut's state. crashed says whether that happened.
func (c *faultCluster) start(ctx context.Context, n *faultNode, crashAt int) (crashed bool, err error) {
	c.net.SetDown(n.id, false)
	fs := journaltest.WrapCrashFS(n.disk)
	fs.CrashAt(crashAt)
	fs.OnCrash(func() { c.net.SetDown(n.id, true) })
	r := &faultRun{sm: newKVSM(), reqc: make(chan struct{}, 1), stop: make(chan struct{})}
	dir := "/" + n.addr
	r.store, err = image.Open(image.Config{Dir: dir, FS: fs, State: r.sm, HTTPClient: c.client})
	if err == nil {
		c.mu.Lock()
		c.images[n.addr] = r.store.Handler()
		c.mu.Unlock()
		cfg := journal.Config{
			ID: n.id, Dir: dir, Addr: n.addr, FS: fs,
			Transport:    c.net.Transport(n.addr),
			StateMachine: r.sm, Snapshots: snapshots{r.store, r.reqc, &c.installs},
			TickInterval: 10 * time.Millisecond, ElectionTicks: 20, HeartbeatTicks: 2,
			StaleAfter:    time.Minute,
			CompactMargin: faultDedupeWindow, DedupeWindow: faultDedupeWindow,
		}
		if n.id == 1 {
			cfg.Bootstrap = true
		} else {
			cfg.Join, cfg.Role = "node1", n.role
		}
		r.j, err = journal.Open(ctx, cfg)
		if err != nil {
			_ = cfg.Transport.Close()
		}
	}
	if err == nil {
		err = r.store.SetClusterID(r.j.Status().ClusterID)
	}
	if err == nil {
		j := r.j
		r.cp, err = image.NewCheckpointer(image.CheckpointerConfig{
			Store: r.store, Journal: journal.ImageLogOf(j),
			Applied:   func() uint64 { return j.Status().Applied },
			NewState:  func() image.State { return newKVSM() },
			Threshold: 15, Interval: 20 * time.Millisecond,
			Enabled: func() bool { return !j.Status().IsLeader() },
			Peers: func() []string {
				var addrs []string
				for _, m := range j.Status().Members {
					if m.ID != n.id {
						addrs = append(addrs, m.Addr)
					}
				}
				return addrs
			},
		})
	}
	if err == nil {
		r.wg.Go(func() {
			for {
				select {
				case <-r.stop:
					return
				case <-r.reqc:
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					_, _ = r.cp.Checkpoint(cctx)
					cancel()
				}
			}
		})
	}
	fs.Disarm() // the cut comes during Open or not at all
	cut := fs.Crashed()
	n.mu.Lock()
	n.run = r
	n.mu.Unlock()
	if cut != nil {
		c.stop(n)
		n.disk = cut
		return true, nil
	}
	if err != nil {
		c.stop(n)
		return false, err
	}
	return false, nil
}

// crash cuts node n's power: off the network, then its disk keeps only
// what was synced at that instant; the old incarnation is closed.
func (c *faultCluster) crash(n *faultNode) {
	c.net.SetDown(n.id, true)
	cut := n.disk.CrashClone(vfs.CrashCloneCfg{})
	c.stop(n)
	n.disk = cut
}

// stop closes node n's running incarnation, whatever state it got to.
func (c *faultCluster) stop(n *faultNode) {
	n.mu.Lock()
	r := n.run
	n.run = nil
	n.mu.Unlock()
	if r == nil {
		return
	}
	var errs []error
	if r.cp != nil {
		close(r.stop)
		r.wg.Wait()
		c.mu.Lock()
		c.written += r.cp.Status().Written
		c.mu.Unlock()
		errs = append(errs, r.cp.Close())
	}
	if r.j != nil {
		errs = append(errs, r.j.Close())
	}
	if r.store != nil {
		errs = append(errs, r.store.Close())
	}
	if err := errors.Join(errs...); err != nil {
		c.t.Errorf("close node %d: %v", n.id, err)
	}
}

// leader returns the leader every running node agrees on (0: none yet).
func (c *faultCluster) leader() uint64 {
	var leader uint64
	for _, n := range c.all() {
		j := n.journal()
		if j == nil {
			continue
		}
		st := j.Status()
		if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return 0
		}
		leader = st.Leader
	}
	if leader == 0 {
		return 0
	}
	if n := c.node(leader); n == nil || n.journal() == nil || !n.journal().Status().IsLeader() {
		return 0
	}
	return leader
}

// waitLeader waits until the running nodes agree on a leader. It looks
// again at every leadership change on a running node, and at least every
// election timeout (a node restarting notifies nobody).
func (c *faultCluster) waitLeader(ctx context.Context) (uint64, error) {
	for {
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}}
		for _, n := range c.all() {
			if j := n.journal(); j != nil {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(j.Leadership())})
			}
		}
		if l := c.leader(); l != 0 {
			return l, nil
		}
		timer := time.NewTimer(200 * time.Millisecond)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)})
		chosen, _, _ := reflect.Select(cases)
		timer.Stop()
		if chosen == 0 {
			return 0, fmt.Errorf("waiting for a leader: %w", context.Cause(ctx))
		}
	}
}

// imagesWritten counts the images written or adopted so far, by every
// incarnation of every node.
func (c *faultCluster) imagesWritten() int {
	c.mu.Lock()
	total := c.written
	c.mu.Unlock()
	for _, n := range c.all() {
		n.mu.Lock()
		if n.run != nil && n.run.cp != nil {
			total += n.run.cp.Status().Written
		}
		n.mu.Unlock()
	}
	return total
}
