package cancel

import (
	"fmt"

	"github.com/metatree/metatree/heartbeat/epoch"
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
// A part registered against an epoch that no event had named (the caller
// learnt it before this registry did: a coordinator that dispatches from
// its new epoch, a member view ahead of the events) is ordered after every
// event applied before it registered, so an event about an older epoch
// never cancels it. The events' generations (epoch.Event.Generation)
// tell whether one skipped transitions that could hide the end of that
// epoch; such an event cancels it, unless it shows the member at an epoch
// that started before the part's (see aheadVerdict). So does an event
// that shows the member at an epoch that started after the part's
// (epoch.Epoch.StartedBefore): the part's process has ended, even
// when no event will ever name it (a worker that restarted again before
// any heartbeat recorded the process the part runs on).
//
// Events must be applied in log order. An event whose Index is not above
// the last one applied for the same node is a replay and is ignored (Index
// 0 is always applied). Apply returns the number of queries it cancelled.
// It takes time in proportion to the queries on ev.Node, cancels their
// contexts after releasing the lock, and starts their callbacks on their
// own goroutines: it never waits for a callback.
func (r *Registry) Apply(ev epoch.Event) int {
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
	// Parts on epochs no event had named end once ev shows the member at
	// an epoch that started after theirs; the others are judged by their
	// order when ev has one, and like the others when it has none.
	hidden, ordered := n.skipped(ev)
	ahead := func(s *epochSlot) bool { return s.ahead && ordered }
	overtaken := func(s *epochSlot) bool { return s.ahead && startedAfter(s.epoch, ev) }
	var victims []victim
	switch ev.Type {
	case epoch.Restarted:
		victims = r.detachLocked(idx, n, ev, func(s *epochSlot) (bool, Reason) {
			switch {
			case overtaken(s):
				return false, Restarted
			case ahead(s):
				return aheadVerdict(s.epoch, ev, hidden, Restarted)
			}
			return s.epoch == ev.NewEpoch, Restarted
		})
		n.supersede(n.current)
		n.supersede(ev.OldEpoch)
		n.unsupersede(ev.NewEpoch)
		n.current = ev.NewEpoch
		n.status = StatusAlive
	case epoch.Dead:
		victims = r.detachLocked(idx, n, ev, func(s *epochSlot) (bool, Reason) {
			switch {
			case overtaken(s):
				return false, Restarted
			case ahead(s):
				return aheadVerdict(s.epoch, ev, hidden, Dead)
			}
			return false, Dead
		})
		n.supersede(n.current)
		n.supersede(ev.OldEpoch)
		if !ev.NewEpoch.IsZero() {
			n.current = ev.NewEpoch
		}
		n.status = StatusDead
	case epoch.Removed:
		victims = r.detachLocked(idx, n, ev, func(*epochSlot) (bool, Reason) { return false, Removed })
		n.supersede(n.current)
		n.supersede(ev.OldEpoch)
		if n.status != StatusRemoved {
			n.status = StatusRemoved
			r.rememberRemovedLocked(n.id)
		}
	case epoch.Added, epoch.Alive:
		if n.status == StatusRemoved {
			r.forgetRemovedLocked(n.id)
		}
		e := ev.NewEpoch
		switched := !e.IsZero() && e != n.current
		// Re-added with another epoch: the old one is void.
		readded := switched && !n.current.IsZero() && !n.current.Temporary() && ev.Type == epoch.Added
		victims = r.detachLocked(idx, n, ev, func(s *epochSlot) (bool, Reason) {
			switch {
			case overtaken(s):
				return false, Restarted
			case ahead(s):
				return aheadVerdict(s.epoch, ev, hidden, Restarted)
			case readded:
				return s.epoch == e, Restarted
			}
			return true, 0
		})
		if switched {
			if n.current.IsZero() {
				n.bindUnknown(e)
			}
			n.supersede(n.current)
			n.unsupersede(e)
			n.current = e
		}
		n.status = StatusAlive
	}
	n.gen = ev.Generation
	n.noteLatest(ev.OldEpoch)
	n.noteLatest(ev.NewEpoch)
	n.confirm()
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

// skipped returns how many of the node's transitions ev's generation
// skips past the last event applied, and whether the two are ordered at
// all: the first event about a node has nothing to be ordered after, and
// one whose generation is not above the last one's has no order either (a
// member record removed and created again counts its generations from
// zero).
func (n *node) skipped(ev epoch.Event) (hidden uint64, ordered bool) {
	if n.status == StatusUnknown || ev.Generation <= n.gen {
		return 0, false
	}
	return ev.Generation - n.gen - 1, true
}

// aheadVerdict decides whether a part on epoch x, which no event had named
// when it registered, survives event ev that skipped hidden transitions,
// and if not, for what reason.
//
// x is newer than every epoch the applied events have shown. So an event
// naming x as its old epoch ends it; one naming x as its new epoch
// confirms it, unless the skipped transitions have room for x to have been
// current, declared dead and back (two of them after x was first
// recorded, ev.EpochGeneration when the record says): a leader of an
// older release records a return after a death with the same epoch, the
// only way an epoch ends and is published again; any other event, about an older
// epoch, leaves it alone, unless it skipped a transition, which may have
// been to x and away from it. It cannot have been when ev shows the member
// at a real epoch that started before x: the transitions ev skipped
// precede that epoch in the log, and the log shows a member's real epochs
// in the order they started (the heartbeat monitor records one that
// started before the recorded one only when it answers twice in a row, a
// restart whose clock stepped back by more than the time between the two
// starts, the one case where a part on x outlives x until an event names
// it).
func aheadVerdict(x epoch.Epoch, ev epoch.Event, hidden uint64, reason Reason) (bool, Reason) {
	switch {
	case x == ev.OldEpoch:
		return false, reason
	case x == ev.NewEpoch:
		recordedLate := ev.EpochGeneration != 0 && ev.Generation-ev.EpochGeneration < 2
		return hidden < 2 || recordedLate, Dead
	default:
		return hidden == 0 || ev.NewEpoch.StartedBefore(x), reason
	}
}

// startedAfter reports whether ev shows the member at a real epoch that
// started after x: a process of the member ran after x's, so x's has
// ended, whatever the events' order (a late event about an older epoch
// shows none that started after x).
func startedAfter(x epoch.Epoch, ev epoch.Event) bool {
	return x.StartedBefore(ev.OldEpoch) || x.StartedBefore(ev.NewEpoch)
}

// noteLatest records that an event showed the node at epoch e.
func (n *node) noteLatest(e epoch.Epoch) {
	if e.Ordered() && (!n.latest.Ordered() || n.latest.StartedBefore(e)) {
		n.latest = e
	}
}

// confirm marks the parts on the node's current epoch as no longer ahead:
// an event has named it.
func (n *node) confirm() {
	for i := range n.slots {
		if n.slots[i].ahead && n.slots[i].epoch == n.current {
			n.slots[i].ahead = false
		}
	}
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
// part there verdict does not keep, marks them cancelled and returns them
// with their causes (the reason verdict gives). Causes are shared per
// epoch slot: one allocation per distinct epoch, not per query.
func (r *Registry) detachLocked(idx uint32, n *node, ev epoch.Event, verdict func(*epochSlot) (bool, Reason)) []victim {
	if len(n.queries) == 0 {
		return nil
	}
	causes := make([]*CanceledError, len(n.slots))
	keeps := make([]bool, len(n.slots))
	var victims []victim
	kept := n.queries[:0]
	for _, q := range n.queries {
		p := q.partOn(idx)
		c := causes[p.slot]
		if c == nil && !keeps[p.slot] {
			slot := &n.slots[p.slot]
			keep, reason := verdict(slot)
			if keeps[p.slot] = keep; !keep {
				ep := slot.epoch
				if ep.IsZero() {
					// Registered before any epoch of the node was known: it
					// ran against the one the event says the node had.
					ep = ev.OldEpoch
				}
				c = &CanceledError{Node: n.id, OldEpoch: ep, NewEpoch: ev.NewEpoch, Reason: reason, Index: ev.Index}
				if reason == Dead && ep == ev.NewEpoch {
					// Its death is hidden in the transitions ev skipped: the
					// temporary epoch published then is unknown here.
					c.NewEpoch = epoch.Epoch{}
				}
				causes[p.slot] = c
			}
		}
		if keeps[p.slot] {
			p.pos = uint32(len(kept))
			kept = append(kept, q)
			continue
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
