package cancel

import (
	"fmt"

	"github.com/metatree/metatree/heartbeat"
)

// victim is a query an event cancelled, with its cause and callback.
type victim struct {
	q     *Query
	cause *CanceledError
	fn    func(*CanceledError)
}

// Apply applies one membership event and cancels the queries it voids:
//
//   - Restarted: every query registered on the node against any epoch other
//     than ev.NewEpoch.
//   - Dead, Removed: every query registered on the node.
//   - Added, Alive: none; they make the node's (new) epoch current again.
//
// Events must be applied in log order. An event whose Index is not above
// the last one applied for the same node is a replay and is ignored (Index
// 0 is always applied). Apply returns the number of queries it cancelled.
// It takes time in proportion to the queries on ev.Node, cancels their
// contexts after releasing the lock, and starts their callbacks on their
// own goroutines: it never waits for a callback.
func (r *Registry) Apply(ev heartbeat.Event) int {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return 0
	}
	idx, n := r.nodeLocked(ev.Node)
	if ev.Index != 0 {
		if ev.Index <= n.lastIndex {
			r.mu.Unlock()
			return 0
		}
		n.lastIndex = ev.Index
	}
	var victims []victim
	switch ev.Type {
	case heartbeat.Restarted:
		victims = r.detachLocked(idx, n, ev, Restarted, func(e heartbeat.Epoch) bool { return e == ev.NewEpoch })
		n.supersede(n.current)
		n.supersede(ev.OldEpoch)
		n.unsupersede(ev.NewEpoch)
		n.current = ev.NewEpoch
		n.status = StatusAlive
	case heartbeat.Dead:
		victims = r.detachLocked(idx, n, ev, Dead, nil)
		n.supersede(n.current)
		n.supersede(ev.OldEpoch)
		if !ev.NewEpoch.IsZero() {
			n.current = ev.NewEpoch
		}
		n.status = StatusDead
	case heartbeat.Removed:
		victims = r.detachLocked(idx, n, ev, Removed, nil)
		n.supersede(n.current)
		n.supersede(ev.OldEpoch)
		if n.status != StatusRemoved {
			n.status = StatusRemoved
			r.rememberRemovedLocked(n.id)
		}
	case heartbeat.Added, heartbeat.Alive:
		if n.status == StatusRemoved {
			r.forgetRemovedLocked(n.id)
		}
		if e := ev.NewEpoch; !e.IsZero() && e != n.current {
			if !n.current.IsZero() && !n.current.Temporary() && ev.Type == heartbeat.Added {
				// Re-added with another epoch: the old one is void.
				victims = r.detachLocked(idx, n, ev, Restarted, func(x heartbeat.Epoch) bool { return x == e })
			}
			if n.current.IsZero() {
				n.bindUnknown(e)
			}
			n.supersede(n.current)
			n.unsupersede(e)
			n.current = e
		}
		n.status = StatusAlive
	}
	r.mu.cancelled += uint64(len(victims))
	for _, v := range victims {
		r.cancelledBy[v.cause.Reason].Add(1)
	}
	for i := range victims {
		if fn, ok := r.mu.onCancel[victims[i].q]; ok {
			victims[i].fn = fn
			delete(r.mu.onCancel, victims[i].q)
			r.callbacks.Add(1)
			r.mu.running++
		}
	}
	r.mu.Unlock()

	for _, v := range victims {
		v.q.cancel(v.cause)
	}
	for _, v := range victims {
		if v.fn != nil {
			go r.runCallback(v.fn, v.cause)
		}
	}
	if len(victims) > 0 {
		r.logger.Info("cancel: queries cancelled", "event", ev.String(), "queries", len(victims))
	}
	return len(victims)
}

func (r *Registry) runCallback(fn func(*CanceledError), cause *CanceledError) {
	defer r.callbacks.Done()
	defer func() {
		if p := recover(); p != nil {
			r.logger.Error("cancel: callback panicked", "cause", cause.Error(), "panic", fmt.Sprint(p))
		}
		r.mu.Lock()
		r.mu.running--
		r.mu.Unlock()
	}()
	fn(cause)
}

// detachLocked removes from the index every query on node n (at idx) whose
// epoch there is not kept (keep nil: none is kept), marks them cancelled
// and returns them with their causes. Causes are shared per epoch: one
// allocation per distinct epoch, not per query.
func (r *Registry) detachLocked(idx uint32, n *node, ev heartbeat.Event, reason Reason, keep func(heartbeat.Epoch) bool) []victim {
	if len(n.queries) == 0 {
		return nil
	}
	causes := make([]*CanceledError, len(n.slots))
	var victims []victim
	if keep == nil {
		victims = make([]victim, 0, len(n.queries))
	}
	kept := n.queries[:0]
	for _, q := range n.queries {
		p := q.partOn(idx)
		epoch := n.slots[p.slot].epoch
		if keep != nil && keep(epoch) {
			p.pos = uint32(len(kept))
			kept = append(kept, q)
			continue
		}
		c := causes[p.slot]
		if c == nil {
			if epoch.IsZero() {
				// Registered before any epoch of the node was known: it
				// ran against the one the event says the node had.
				epoch = ev.OldEpoch
			}
			c = &CanceledError{Node: n.id, OldEpoch: epoch, NewEpoch: ev.NewEpoch, Reason: reason, Index: ev.Index}
			causes[p.slot] = c
		}
		victims = append(victims, victim{q: q, cause: c})
	}
	clear(n.queries[len(kept):])
	n.queries = kept
	for _, v := range victims {
		q := v.q
		q.state = queryCancelled
		for i := range q.parts() {
			p := q.part(i)
			if p.node == idx {
				n.slots[p.slot].refs--
				continue
			}
			r.removePartLocked(p)
		}
		r.mu.live--
	}
	n.shrink()
	return victims
}

// removePartLocked removes one part from its node's index.
func (r *Registry) removePartLocked(p *part) {
	n := r.mu.nodes[p.node]
	n.slots[p.slot].refs--
	last := len(n.queries) - 1
	if int(p.pos) != last {
		moved := n.queries[last]
		n.queries[p.pos] = moved
		moved.partOn(p.node).pos = p.pos
	}
	n.queries[last] = nil
	n.queries = n.queries[:last]
	n.shrink()
	if len(n.queries) == 0 && n.status == StatusUnknown {
		// Known only through registrations: nothing to remember once its
		// last query is gone, so memory stays bounded by live queries.
		r.dropNodeLocked(p.node)
	}
}

// dropNodeLocked forgets the node at idx and frees its index.
func (r *Registry) dropNodeLocked(idx uint32) {
	delete(r.mu.index, r.mu.nodes[idx].id)
	r.mu.nodes[idx] = nil
	r.mu.free = append(r.mu.free, idx)
}

// rememberRemovedLocked keeps a removed member's tombstone, evicting the
// oldest beyond MaxRemoved so memory stays bounded.
func (r *Registry) rememberRemovedLocked(id uint64) {
	r.mu.removed = append(r.mu.removed, id)
	for len(r.mu.removed) > r.maxRemoved {
		old := r.mu.removed[0]
		r.mu.removed = r.mu.removed[1:]
		if idx, ok := r.mu.index[old]; ok && r.mu.nodes[idx].status == StatusRemoved && len(r.mu.nodes[idx].queries) == 0 {
			r.dropNodeLocked(idx)
		}
	}
}

func (r *Registry) forgetRemovedLocked(id uint64) {
	for i, x := range r.mu.removed {
		if x == id {
			r.mu.removed = append(r.mu.removed[:i], r.mu.removed[i+1:]...)
			return
		}
	}
}

// Close cancels every live query with cause ErrClosed (no event can reach
// them any more), refuses new registrations, and waits for running cancel
// callbacks. It is idempotent.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		r.callbacks.Wait()
		return nil
	}
	r.mu.closed = true
	var live []*Query
	for _, n := range r.mu.nodes {
		if n == nil {
			continue
		}
		for _, q := range n.queries {
			if q.state == queryLive {
				q.state = queryCancelled
				live = append(live, q)
			}
		}
		n.queries = nil
		n.slots = nil
	}
	r.mu.live = 0
	clear(r.mu.onCancel)
	r.mu.Unlock()
	for _, q := range live {
		q.cancel(ErrClosed)
	}
	r.callbacks.Wait()
	return nil
}
