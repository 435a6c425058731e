package journaltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/journal"
)

// queueLen bounds the batches waiting on one sending direction; more are
// dropped (and reported unreachable), as a full socket buffer would.
const queueLen = 1024

// drainTimeout bounds how long a removed peer's queue is still delivered
// (what was queued before RemovePeer), like the HTTP transport's default
// HandshakeTimeout.
const drainTimeout = 3 * time.Second

// Network is an in-memory network between journal nodes. All methods are
// safe for concurrent use. Faults apply to raft messages, forwarded
// proposals and joins alike; a forwarded proposal can also lose its answer
// (the partition begins while it runs), which is what idempotency keys are
// for.
type Network struct {
	mu struct {
		sync.Mutex
		rng       *rand.Rand
		nodes     map[string]*Transport // by address, while started
		group     map[uint64]int        // partition group per node id; absent = 0
		down      map[uint64]bool       // crashed nodes: nothing in or out (Heal keeps them)
		drop      map[link]float64      // per direction; link{0,0} = every link
		delay     map[link]delaySpec    // per direction; link{0,0} = every link
		delivered uint64
		dropped   uint64
	}
}

type link struct{ from, to uint64 }

type delaySpec struct{ base, jitter time.Duration }

// NewNetwork returns an empty network whose random choices come from seed.
func NewNetwork(seed uint64) *Network {
	n := &Network{}
	n.mu.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	n.mu.nodes = map[string]*Transport{}
	n.mu.group = map[uint64]int{}
	n.mu.down = map[uint64]bool{}
	n.mu.drop = map[link]float64{}
	n.mu.delay = map[link]delaySpec{}
	return n
}

// Transport returns a new transport for the node that will listen on addr
// (the node's Config.Addr). Pass it as Config.Transport; one per Journal,
// a fresh one for each restart.
func (n *Network) Transport(addr string) *Transport {
	return &Transport{net: n, addr: addr, peers: map[uint64]string{}, queues: map[uint64]*queue{}}
}

// Partition splits the network: each group can talk only within itself;
// the nodes not named form one more group. Partition replaces any earlier
// partition.
func (n *Network) Partition(groups ...[]uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.group = map[uint64]int{}
	for i, g := range groups {
		for _, id := range g {
			n.mu.group[id] = i + 1
		}
	}
}

// Isolate cuts id off from every other node (a partition of one).
func (n *Network) Isolate(id uint64) { n.Partition([]uint64{id}) }

// Drop makes the link from → to lose each message with probability rate
// (0 restores it). from = to = 0 sets the rate of every link that has no
// rate of its own.
func (n *Network) Drop(from, to uint64, rate float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if rate <= 0 {
		delete(n.mu.drop, link{from, to})
		return
	}
	n.mu.drop[link{from, to}] = rate
}

// Delay delays every message on from → to by base plus a uniform random
// jitter in [0, jitter), keeping the link's order. from = to = 0 sets every
// link that has no delay of its own; base = jitter = 0 removes it.
func (n *Network) Delay(from, to uint64, base, jitter time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if base <= 0 && jitter <= 0 {
		delete(n.mu.delay, link{from, to})
		return
	}
	n.mu.delay[link{from, to}] = delaySpec{base, jitter}
}

// SetDown marks node id as powered off (true) or back (false): nothing
// reaches it or leaves it, whatever the partitions, until it is back. A
// crash test sets it before cloning the node's filesystem, so the node
// cannot acknowledge anything the clone does not hold.
func (n *Network) SetDown(id uint64, down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if down {
		n.mu.down[id] = true
	} else {
		delete(n.mu.down, id)
	}
}

// Heal removes every partition, drop rate and delay (not SetDown).
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.group = map[uint64]int{}
	n.mu.drop = map[link]float64{}
	n.mu.delay = map[link]delaySpec{}
}

// Stats returns the messages delivered and dropped so far.
func (n *Network) Stats() (delivered, dropped uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.delivered, n.mu.dropped
}

// route decides the fate of one message or call on from → to: whether it
// is delivered and after how long.
func (n *Network) route(from, to uint64) (ok bool, delay time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.group[from] != n.mu.group[to] || n.mu.down[from] || n.mu.down[to] {
		n.mu.dropped++
		return false, 0
	}
	rate, has := n.mu.drop[link{from, to}]
	if !has {
		rate = n.mu.drop[link{}]
	}
	if rate > 0 && n.mu.rng.Float64() < rate {
		n.mu.dropped++
		return false, 0
	}
	d, has := n.mu.delay[link{from, to}]
	if !has {
		d = n.mu.delay[link{}]
	}
	delay = d.base
	if d.jitter > 0 {
		delay += time.Duration(n.mu.rng.Int64N(int64(d.jitter)))
	}
	n.mu.delivered++
	return true, delay
}

// connected reports whether from and to are in the same partition group.
func (n *Network) connected(from, to uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.group[from] == n.mu.group[to] && !n.mu.down[from] && !n.mu.down[to]
}

func (n *Network) lookup(addr string) *Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.nodes[addr]
}

// Transport is one node's end of a Network; it implements
// journal.Transport. Create it with Network.Transport.
type Transport struct {
	net  *Network
	addr string

	mu      sync.Mutex
	local   uint64
	recv    journal.Receiver
	peers   map[uint64]string
	queues  map[uint64]*queue
	started bool
	closed  bool

	// ctx is cancelled by Close; calls into this node's Receiver use it.
	ctx    context.Context
	cancel context.CancelFunc
	// wg tracks the goroutines this transport owns (senders, snapshots);
	// inbound tracks calls other nodes are making into our Receiver.
	wg      sync.WaitGroup
	inbound sync.WaitGroup
}

var _ journal.Transport = (*Transport)(nil)

// queue is one sending direction: batches delivered in order by one
// goroutine.
type queue struct {
	to   uint64
	c    chan batch
	last time.Time // latest due time handed out, to keep order under jitter
	// drain is closed by RemovePeer: the goroutine delivers what is
	// queued, due before drainBy, to addr (the peer's address then), and
	// stops. Both are set before drain is closed.
	drain   chan struct{}
	addr    string
	drainBy time.Time
}

type batch struct {
	msgs []*raftpb.Message
	due  time.Time
}

// Start implements journal.Transport: it registers the node at its address.
func (t *Transport) Start(local uint64, r journal.Receiver) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started {
		return errors.New("journaltest: transport started twice")
	}
	t.net.mu.Lock()
	defer t.net.mu.Unlock()
	if other := t.net.mu.nodes[t.addr]; other != nil {
		return fmt.Errorf("journaltest: address %s is in use by node %d", t.addr, other.local)
	}
	t.net.mu.nodes[t.addr] = t
	t.local, t.recv, t.started = local, r, true
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return nil
}

// SetPeer implements journal.Transport.
func (t *Transport) SetPeer(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.peers[id] = addr
}

// RemovePeer implements journal.Transport. As over HTTP, the peer's queue
// still delivers what it holds (the append that tells a removed node its
// removal committed, sent just before), for at most drainTimeout, and
// then stops; nothing sent afterwards reaches the peer.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q := t.queues[id]; q != nil {
		q.addr = t.peers[id]
		q.drainBy = time.Now().Add(drainTimeout)
		close(q.drain)
		delete(t.queues, id)
	}
	delete(t.peers, id)
}

// Send implements journal.Transport: it copies the messages (raft owns the
// originals) and queues them per destination; it never blocks.
func (t *Transport) Send(msgs []*raftpb.Message) {
	byTo := map[uint64][]*raftpb.Message{}
	var order []uint64
	for _, m := range msgs {
		c := proto.Clone(m).(*raftpb.Message)
		if m.GetType() == raftpb.MsgSnap {
			t.sendSnapshot(c)
			continue
		}
		if _, ok := byTo[m.GetTo()]; !ok {
			order = append(order, m.GetTo())
		}
		byTo[m.GetTo()] = append(byTo[m.GetTo()], c)
	}
	for _, to := range order {
		t.enqueue(to, byTo[to])
	}
}

func (t *Transport) enqueue(to uint64, msgs []*raftpb.Message) {
	ok, delay := t.net.route(t.local, to)
	if !ok {
		t.unreachable(to)
		return
	}
	t.mu.Lock()
	if t.closed || !t.started {
		t.mu.Unlock()
		return
	}
	q := t.queues[to]
	if q == nil {
		q = &queue{to: to, c: make(chan batch, queueLen), drain: make(chan struct{})}
		t.queues[to] = q
		t.wg.Go(func() { t.deliverLoop(q) })
	}
	due := time.Now().Add(delay)
	if due.Before(q.last) {
		due = q.last // a link keeps its order
	}
	q.last = due
	select {
	case q.c <- batch{msgs: msgs, due: due}:
		t.mu.Unlock()
	default:
		t.mu.Unlock()
		t.unreachable(to)
	}
}

func (t *Transport) deliverLoop(q *queue) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b, ok := t.next(q)
		if !ok {
			return
		}
		if wait := time.Until(b.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-t.ctx.Done():
				return
			}
		}
		// The partition may have begun while the batch was queued.
		if !t.net.connected(t.local, q.to) {
			t.unreachable(q.to)
			continue
		}
		if err := t.deliverQueued(q, b.msgs); err != nil {
			t.undelivered(q.to, err)
		}
	}
}

// next returns the next batch of q to deliver, waiting for one; false once
// the transport is closed, or once q is removed and holds nothing more due
// before its drain deadline.
func (t *Transport) next(q *queue) (batch, bool) {
	if t.ctx.Err() != nil {
		return batch{}, false
	}
	select {
	case b := <-q.c:
		return b, t.deliverable(q, b)
	case <-q.drain:
		select {
		case b := <-q.c:
			return b, t.deliverable(q, b)
		default:
			return batch{}, false
		}
	case <-t.ctx.Done():
		return batch{}, false
	}
}

// deliverable reports whether b, taken from q, is still to be delivered:
// on a removed peer's queue only what is due before the drain deadline is
// (drainBy is set before drain is closed, and read only after it is).
func (t *Transport) deliverable(q *queue, b batch) bool {
	select {
	case <-q.drain:
		return !b.due.After(q.drainBy)
	default:
		return true
	}
}

// deliverQueued delivers a batch of q: to the peer's current address, or,
// once the peer is removed, to the one it had when RemovePeer ran.
func (t *Transport) deliverQueued(q *queue, msgs []*raftpb.Message) error {
	select {
	case <-q.drain:
		dst := t.net.lookup(q.addr)
		if dst == nil {
			return fmt.Errorf("%w: removed node %d at %s is down", journal.ErrUnreachable, q.to, q.addr)
		}
		return dst.call(func(ctx context.Context, r journal.Receiver) error {
			return r.Receive(ctx, msgs)
		})
	default:
		return t.deliver(q.to, msgs)
	}
}

// deliver hands msgs to the Receiver of node to.
func (t *Transport) deliver(to uint64, msgs []*raftpb.Message) error {
	dst, err := t.peer(to)
	if err != nil {
		return err
	}
	return dst.call(func(ctx context.Context, r journal.Receiver) error {
		return r.Receive(ctx, msgs)
	})
}

// sendSnapshot delivers a MsgSnap on its own goroutine and reports the
// outcome to the local node exactly once.
func (t *Transport) sendSnapshot(m *raftpb.Message) {
	t.mu.Lock()
	if t.closed || !t.started {
		t.mu.Unlock()
		return
	}
	to, recv := m.GetTo(), t.recv
	t.wg.Go(func() {
		ok, delay := t.net.route(t.local, to)
		if ok && delay > 0 {
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
			case <-t.ctx.Done():
				timer.Stop()
				ok = false
			}
		}
		if ok {
			ok = t.deliver(to, []*raftpb.Message{m}) == nil
		}
		recv.ReportSnapshot(to, ok)
	})
	t.mu.Unlock()
}

// undelivered reports a delivery to node to that failed with err: a
// refusal as a removed node's through ReportRemoved, anything else as
// unreachable.
func (t *Transport) undelivered(to uint64, err error) {
	if !errors.Is(err, journal.ErrRemoved) {
		t.unreachable(to)
		return
	}
	if recv := t.liveReceiver(); recv != nil {
		recv.ReportRemoved(to)
	}
}

func (t *Transport) unreachable(to uint64) {
	if recv := t.liveReceiver(); recv != nil {
		recv.ReportUnreachable(to)
	}
}

// liveReceiver returns the local Receiver while the transport is started
// and not closed (after Close it must not be called), and nil otherwise.
func (t *Transport) liveReceiver() journal.Receiver {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.started || t.closed {
		return nil
	}
	return t.recv
}

// peer finds the running transport of node id.
func (t *Transport) peer(id uint64) (*Transport, error) {
	t.mu.Lock()
	addr, ok := t.peers[id]
	t.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: no address for node %d", journal.ErrUnreachable, id)
	}
	dst := t.net.lookup(addr)
	if dst == nil {
		return nil, fmt.Errorf("%w: node %d at %s is down", journal.ErrUnreachable, id, addr)
	}
	return dst, nil
}

// call runs f against this transport's Receiver unless the transport is
// closed; Close waits for calls in progress.
func (t *Transport) call(f func(ctx context.Context, r journal.Receiver) error) error {
	t.mu.Lock()
	if t.closed || !t.started {
		t.mu.Unlock()
		return fmt.Errorf("%w: node at %s is down", journal.ErrUnreachable, t.addr)
	}
	t.inbound.Add(1)
	ctx, recv := t.ctx, t.recv
	t.mu.Unlock()
	defer t.inbound.Done()
	return f(ctx, recv)
}

// Forward implements journal.Transport: it calls HandleForward on node to
// and returns its answer unchanged (journal sentinels stay errors.Is
// comparable). A cut link fails with journal.ErrUnreachable, also after
// the call ran when the partition began meanwhile (the answer is lost).
func (t *Transport) Forward(ctx context.Context, to uint64, req *journal.ForwardRequest) (*journal.ForwardResponse, error) {
	if err := t.travel(ctx, to); err != nil {
		return nil, err
	}
	dst, err := t.peer(to)
	if err != nil {
		return nil, err
	}
	cp := *req
	cp.Data = append([]byte(nil), req.Data...)
	var resp *journal.ForwardResponse
	err = dst.call(func(dctx context.Context, r journal.Receiver) error {
		ctx, cancel := mergeCancel(ctx, dctx)
		defer cancel()
		var err error
		resp, err = r.HandleForward(ctx, &cp)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := t.travel(ctx, to); err != nil {
		return nil, fmt.Errorf("answer lost: %w", err)
	}
	out := *resp
	return &out, nil
}

// Join implements journal.Transport: it calls HandleJoin on the node
// registered at helperAddr.
func (t *Transport) Join(ctx context.Context, helperAddr string, req *journal.JoinRequest) (*journal.JoinResponse, error) {
	dst := t.net.lookup(helperAddr)
	if dst == nil {
		return nil, fmt.Errorf("%w: no node at %s", journal.ErrUnreachable, helperAddr)
	}
	dst.mu.Lock()
	helper := dst.local
	dst.mu.Unlock()
	if err := t.travel(ctx, helper); err != nil {
		return nil, err
	}
	cp := *req
	var resp *journal.JoinResponse
	err := dst.call(func(dctx context.Context, r journal.Receiver) error {
		ctx, cancel := mergeCancel(ctx, dctx)
		defer cancel()
		var err error
		resp, err = r.HandleJoin(ctx, &cp)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := *resp
	out.Members = append([]journal.Member(nil), resp.Members...)
	return &out, nil
}

// travel applies the link's fate to one call leg: cut or dropped fails with
// ErrUnreachable, a delay waits (on ctx).
func (t *Transport) travel(ctx context.Context, to uint64) error {
	t.mu.Lock()
	local := t.local
	t.mu.Unlock()
	ok, delay := t.net.route(local, to)
	if !ok {
		return fmt.Errorf("%w: link %d -> %d is cut", journal.ErrUnreachable, local, to)
	}
	if delay > 0 {
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// mergeCancel returns a context done when either a or b is.
func mergeCancel(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(a)
	stop := context.AfterFunc(b, func() { cancel(context.Cause(b)) })
	return ctx, func() { stop(); cancel(context.Canceled) }
}

// Close implements journal.Transport: it unregisters the node, stops its
// goroutines and waits for them and for calls in progress into its
// Receiver. It is idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	started := t.started
	if started {
		t.cancel() // stops every queue's goroutine, removed peers' too
		clear(t.queues)
	}
	t.mu.Unlock()
	if !started {
		return nil
	}
	t.net.mu.Lock()
	if t.net.mu.nodes[t.addr] == t {
		delete(t.net.mu.nodes, t.addr)
	}
	t.net.mu.Unlock()
	t.wg.Wait()
	t.inbound.Wait()
	return nil
}
