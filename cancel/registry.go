package cancel

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/metatree/metatree/heartbeat/epoch"
)

// Member names one participant of a query: a member id and the epoch the
// query runs against. Take the epoch from [Registry.Node] (or from the same
// event stream that feeds the registry); the zero epoch means "the epoch the
// registry currently knows for that node".
type Member struct {
	Node  uint64
	Epoch epoch.Epoch
}

// Config configures a Registry. The zero value is ready to use.
type Config struct {
	// Logger receives registry events (callback panics, storms). Default:
	// discard.
	Logger *slog.Logger
	// MaxRemoved is how many removed members are remembered so that late
	// registrations against them fail. Default 1024.
	MaxRemoved int
}

// Status is a member's status as the registry knows it.
type Status uint8

const (
	// StatusUnknown: no event has named the member yet.
	StatusUnknown Status = iota
	// StatusAlive: the member answers heartbeats.
	StatusAlive
	// StatusDead: the member was declared dead.
	StatusDead
	// StatusRemoved: the member was removed from the cluster.
	StatusRemoved
)

// String returns the lower-case name of s.
func (s Status) String() string {
	switch s {
	case StatusAlive:
		return "alive"
	case StatusDead:
		return "dead"
	case StatusRemoved:
		return "removed"
	}
	return "unknown"
}

// NodeState is what the registry knows of one member.
type NodeState struct {
	Node   uint64
	Epoch  epoch.Epoch // current epoch (temporary when dead)
	Status Status
	Index  uint64 // index of the last event applied for it
	Live   int    // live queries with a part on it
}

// Stats are the registry's sizes, for metrics.
type Stats struct {
	Live      int    // live (registered, not finished, not cancelled) queries
	Nodes     int    // members tracked (removed ones included), plus nodes only live queries name
	Removed   int    // removed members remembered
	Cancelled uint64 // queries cancelled by events since New
	Callbacks int    // cancel callbacks running now
}

// tombstones is how many superseded epochs each member remembers.
// Registering against one fails at once, as against any epoch that
// started before the latest one the events have shown; an older
// superseded epoch without a start time (epoch.Epoch.Ordered) is
// taken for one no event has named yet (accepted, and judged by the
// events that follow as aheadVerdict says).
const tombstones = 8

type node struct {
	id        uint64
	status    Status
	current   epoch.Epoch
	lastIndex uint64
	// gen is the member record's generation after the last event applied
	// (epoch.Event.Generation): the order of the node's epochs.
	gen uint64
	// latest is the real epoch that started last (Epoch.StartedBefore)
	// among those the applied events have shown: every epoch of the node
	// that started before it has ended.
	latest   epoch.Epoch
	tomb     [tombstones]epoch.Epoch // ring of superseded epochs
	tombNext uint8
	slots    []epochSlot // epochs that live parts run against; part.slot indexes it
	queries  []*Query    // live queries with a part here; part.pos indexes it
}

type epochSlot struct {
	epoch epoch.Epoch
	refs  uint32
	// ahead marks an epoch that no event has named yet: the caller knew it
	// from a fresher source (the coordinator itself, a member view ahead
	// of the events). It is newer than every epoch the node's events have
	// shown up to node.gen, so an event about an older epoch leaves it
	// alone (see aheadVerdict).
	ahead bool
}

// part is one participant of one query, as indexes into the registry.
type part struct {
	node uint32 // index into Registry.mu.nodes
	slot uint32 // index into node.slots
	pos  uint32 // index into node.queries
}

const (
	queryLive uint8 = iota
	queryFinished
	queryCancelled
)

// Query is one registered query (or fragment). Its Context is cancelled
// with a *CanceledError cause when a participant restarts, dies or is
// removed. Call Finish when the query ends. Safe for concurrent use.
type Query struct {
	r      *Registry
	ctx    context.Context
	cancel context.CancelCauseFunc
	state  uint8 // guarded by r.mu
	n      uint8 // parts in inline; the rest are in extra
	inline [3]part
	extra  []part
}

// Context returns the query's context: cancelled with a *CanceledError
// cause (context.Cause) on a membership event, with ErrClosed when the
// registry closes, and with context.Canceled after Finish.
func (q *Query) Context() context.Context { return q.ctx }

// Finish unregisters the query and releases its context. It is idempotent
// and safe after cancellation.
func (q *Query) Finish() { q.r.finish(q) }

func (q *Query) parts() int { return int(q.n) + len(q.extra) }

func (q *Query) part(i int) *part {
	if i < int(q.n) {
		return &q.inline[i]
	}
	return &q.extra[i-int(q.n)]
}

// partOn returns the query's part on the node at index idx.
func (q *Query) partOn(idx uint32) *part {
	for i := range q.parts() {
		if p := q.part(i); p.node == idx {
			return p
		}
	}
	panic("cancel: query not indexed on node") // invariant broken: a bug here, not user input
}

// Registry tracks live queries by member and cancels them on membership
// events. Create it with New; it is safe for concurrent use.
type Registry struct {
	logger     *slog.Logger
	maxRemoved int
	callbacks  sync.WaitGroup
	// cancelledBy counts cancelled queries by Reason, for Collector.
	cancelledBy [Removed + 1]atomic.Uint64

	mu struct {
		sync.Mutex
		closed    bool
		index     map[uint64]uint32 // member id -> index into nodes
		nodes     []*node
		free      []uint32 // reusable indexes into nodes
		removed   []uint64 // removed members, oldest first (FIFO cap)
		live      int
		cancelled uint64
		running   int                             // callbacks running
		onCancel  map[*Query]func(*CanceledError) // only for queries that asked
	}
}

// New returns an empty registry.
func New(cfg Config) *Registry {
	r := &Registry{logger: cfg.Logger, maxRemoved: cfg.MaxRemoved}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	if r.maxRemoved <= 0 {
		r.maxRemoved = 1024
	}
	r.mu.index = make(map[uint64]uint32)
	r.mu.onCancel = make(map[*Query]func(*CanceledError))
	return r
}

// RegisterOption is an optional argument of Register.
type RegisterOption func(*registerOptions)

type registerOptions struct {
	onCancel func(*CanceledError)
}

// OnCancel runs fn once if the query is cancelled by a membership event
// (not on Finish or Close). fn runs on its own goroutine, outside the
// registry's lock; a panic in it is recovered and logged. Close waits for
// running callbacks, so fn must return.
func OnCancel(fn func(*CanceledError)) RegisterOption {
	return func(o *registerOptions) { o.onCancel = fn }
}

// Register registers a query run by coordinator with fragments on workers
// (none on the worker side, where a fragment registers with its
// coordinator only). The returned Query's context derives from parent.
//
// If a participant's epoch was already superseded by an event the registry
// has applied (the node restarted, was declared dead or was removed),
// Register fails at once with that *CanceledError. Registration and event
// application are atomic with respect to each other.
//
// A participant no event has named yet is accepted (this frontend may lag
// the one that chose it); the registry keeps what it knows of such a node
// only while queries run on it.
func (r *Registry) Register(parent context.Context, coordinator Member, workers []Member, opts ...RegisterOption) (*Query, error) {
	return r.register(parent, coordinator, workers, false, opts...)
}

func (r *Registry) register(parent context.Context, coordinator Member, workers []Member, knownCoordinator bool, opts ...RegisterOption) (*Query, error) {
	var o registerOptions
	for _, fn := range opts {
		fn(&o)
	}
	q := &Query{r: r}
	if n := 1 + len(workers); n > len(q.inline) {
		q.extra = make([]part, 0, n-len(q.inline))
	}
	// Build the context outside the lock: it touches the parent.
	q.ctx, q.cancel = context.WithCancelCause(parent)

	r.mu.Lock()
	err := r.registerLocked(q, coordinator, workers, knownCoordinator)
	if err == nil && o.onCancel != nil {
		r.mu.onCancel[q] = o.onCancel
	}
	r.mu.Unlock()
	if err != nil {
		q.cancel(err)
		return nil, err
	}
	return q, nil
}

func (r *Registry) registerLocked(q *Query, coordinator Member, workers []Member, knownCoordinator bool) error {
	if r.mu.closed {
		return ErrClosed
	}
	if _, ok := r.mu.index[coordinator.Node]; knownCoordinator && !ok {
		return fmt.Errorf("%w: coordinator %d: no heartbeat has named it yet", ErrUnknownNode, coordinator.Node)
	}
	// Validate every participant before indexing any, so a failure leaves
	// nothing behind.
	if err := r.checkLocked(coordinator); err != nil {
		return err
	}
	for i, w := range workers {
		if w.Node == coordinator.Node && w.Epoch != coordinator.Epoch && !w.Epoch.IsZero() && !coordinator.Epoch.IsZero() {
			return fmt.Errorf("%w: node %d named with epochs %s and %s", ErrInvalid, w.Node, coordinator.Epoch, w.Epoch)
		}
		for _, v := range workers[:i] {
			if v.Node == w.Node && v.Epoch != w.Epoch {
				return fmt.Errorf("%w: node %d named with epochs %s and %s", ErrInvalid, w.Node, v.Epoch, w.Epoch)
			}
		}
		if err := r.checkLocked(w); err != nil {
			return err
		}
	}
	r.addPartLocked(q, coordinator)
	for _, w := range workers {
		r.addPartLocked(q, w)
	}
	r.mu.live++
	return nil
}

// checkLocked fails if m's epoch was superseded by an applied event.
func (r *Registry) checkLocked(m Member) error {
	idx, ok := r.mu.index[m.Node]
	if !ok {
		return nil // never heard of it: accept; events will follow
	}
	n := r.mu.nodes[idx]
	epoch := m.Epoch
	if epoch.IsZero() {
		epoch = n.current
	}
	switch {
	case n.status == StatusRemoved:
		return &CanceledError{Node: n.id, OldEpoch: epoch, Reason: Removed, Index: n.lastIndex}
	case n.status == StatusDead && (epoch == n.current || n.superseded(epoch)):
		return &CanceledError{Node: n.id, OldEpoch: epoch, NewEpoch: n.current, Reason: Dead, Index: n.lastIndex}
	case epoch != n.current && (n.superseded(epoch) || epoch.StartedBefore(n.latest)):
		// Superseded, or never named but started before an epoch the
		// events have shown: it has ended.
		return &CanceledError{Node: n.id, OldEpoch: epoch, NewEpoch: n.current, Reason: Restarted, Index: n.lastIndex}
	}
	// The current epoch, or one the registry has not seen yet (it may lag
	// the caller) and that started after every epoch it has: accept. A
	// part on an unseen epoch is ordered after every event applied so far;
	// the events that follow confirm it or cancel it (aheadVerdict).
	return nil
}

func (n *node) superseded(e epoch.Epoch) bool {
	if e.IsZero() {
		return false
	}
	for _, t := range n.tomb {
		if t == e {
			return true
		}
	}
	return false
}

// supersede records that e is no longer n's epoch.
func (n *node) supersede(e epoch.Epoch) {
	if e.IsZero() || n.superseded(e) {
		return
	}
	n.tomb[n.tombNext] = e
	n.tombNext = (n.tombNext + 1) % tombstones
}

// bindUnknown ties the parts registered while n's epoch was unknown (the
// zero epoch meant "the current one") to e, the first epoch learnt for n,
// so that their causes name it.
func (n *node) bindUnknown(e epoch.Epoch) {
	for i := range n.slots {
		if n.slots[i].refs > 0 && n.slots[i].epoch.IsZero() {
			n.slots[i].epoch = e
		}
	}
}

// unsupersede forgets a tombstone (a dead member came back with its epoch).
func (n *node) unsupersede(e epoch.Epoch) {
	for i, t := range n.tomb {
		if t == e {
			n.tomb[i] = epoch.Epoch{}
		}
	}
}

func (r *Registry) nodeLocked(id uint64) (uint32, *node) {
	if idx, ok := r.mu.index[id]; ok {
		return idx, r.mu.nodes[idx]
	}
	n := &node{id: id}
	var idx uint32
	if k := len(r.mu.free); k > 0 {
		idx = r.mu.free[k-1]
		r.mu.free = r.mu.free[:k-1]
		r.mu.nodes[idx] = n
	} else {
		idx = uint32(len(r.mu.nodes))
		r.mu.nodes = append(r.mu.nodes, n)
	}
	r.mu.index[id] = idx
	return idx, n
}

func (r *Registry) addPartLocked(q *Query, m Member) {
	idx, n := r.nodeLocked(m.Node)
	for i := range q.parts() { // the same node named twice: one part
		if q.part(i).node == idx {
			return
		}
	}
	epoch := m.Epoch
	if epoch.IsZero() {
		epoch = n.current
	}
	s := n.slotFor(epoch)
	if n.slots[s].refs == 1 {
		n.slots[s].ahead = !epoch.IsZero() && epoch != n.current
	}
	p := part{node: idx, slot: s, pos: uint32(len(n.queries))}
	n.queries = append(n.queries, q)
	if int(q.n) < len(q.inline) {
		q.inline[q.n] = p
		q.n++
	} else {
		q.extra = append(q.extra, p)
	}
}

// slotFor interns e among n's slots and takes a reference.
func (n *node) slotFor(e epoch.Epoch) uint32 {
	free := -1
	for i := range n.slots {
		if n.slots[i].refs > 0 && n.slots[i].epoch == e {
			n.slots[i].refs++
			return uint32(i)
		}
		if n.slots[i].refs == 0 && free < 0 {
			free = i
		}
	}
	if free < 0 {
		free = len(n.slots)
		n.slots = append(n.slots, epochSlot{})
	}
	n.slots[free] = epochSlot{epoch: e, refs: 1}
	return uint32(free)
}

// unindexLocked removes q from every node's index.
func (r *Registry) unindexLocked(q *Query) {
	for i := range q.parts() {
		r.removePartLocked(q.part(i))
	}
	r.mu.live--
}

// shrink keeps a node's index proportional to its live queries.
func (n *node) shrink() {
	if c := cap(n.queries); c > 64 && len(n.queries) < c/4 {
		n.queries = append(make([]*Query, 0, c/2), n.queries...)
	}
	if len(n.queries) == 0 && len(n.slots) > 4 {
		n.slots = nil
	}
}

func (r *Registry) finish(q *Query) {
	r.mu.Lock()
	if q.state != queryLive {
		r.mu.Unlock()
		return
	}
	q.state = queryFinished
	r.unindexLocked(q)
	delete(r.mu.onCancel, q)
	r.mu.Unlock()
	q.cancel(nil) // release the context; its cause is context.Canceled
}

// Node returns what the registry knows of member id.
func (r *Registry) Node(id uint64) (NodeState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	idx, ok := r.mu.index[id]
	if !ok {
		return NodeState{}, false
	}
	n := r.mu.nodes[idx]
	return NodeState{Node: n.id, Epoch: n.current, Status: n.status, Index: n.lastIndex, Live: len(n.queries)}, true
}

// Stats returns the registry's sizes.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Stats{
		Live:      r.mu.live,
		Nodes:     len(r.mu.index),
		Removed:   len(r.mu.removed),
		Cancelled: r.mu.cancelled,
		Callbacks: r.mu.running,
	}
}
