package catalog

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// Event is one change, delivered to watchers in log order after its batch
// has applied. Before and After are shared between watchers: read-only.
type Event struct {
	Index  uint64 // the batch's log index
	Op     OpType // OpCreate, OpUpdate, OpDelete, OpMove; OpResync after Load
	Before *Node  // the node before (update, delete, move); nil for create
	After  *Node  // the node after (create, update, move); nil for delete
}

// WatchOptions selects the events a watcher receives.
type WatchOptions struct {
	// Prefix limits events to nodes at or under this path ("" or "/": all).
	// A move is delivered if its old or new path is under Prefix, or if it
	// moves a subtree containing Prefix.
	Prefix string
	// Kind limits events to nodes of this kind ("" : all kinds).
	Kind string
	// Buffer is how many of its events the watcher may fall behind by
	// (default DefaultWatchBuffer). Past that it is cut off with
	// ErrResync instead of holding Apply back: it still reads the events
	// up to the one that overflowed it, then Next fails. The tree keeps
	// twice the largest Buffer of its watchers in events of all of them
	// together, so a watcher that falls that far behind the tree's events
	// is cut off at once, even if few were its own.
	Buffer int
}

// DefaultWatchBuffer is the Buffer of a watcher whose WatchOptions.Buffer
// is 0.
const DefaultWatchBuffer = 1024

// Watcher receives the events of one subscription, through Next (or
// TryNext), in log order. Its methods are safe for concurrent use; Next
// and TryNext hand each event to one of their callers.
type Watcher struct {
	t      *Tree
	f      watchFilter
	g      *watchGroup
	buffer int
	start  uint64
	// after: events of batches at or below it are not delivered (a watch
	// resumed after an index this tree has not reached yet).
	after uint64
	done  chan struct{} // closed by Close: wakes a waiting Next
	gen   uint64        // the hub generation it registered in

	mu struct {
		sync.Mutex
		cur   ringPos     // the next event to read
		b     *watchBatch // the batch at cur.seq, once loaded
		scan  ringPos     // how far the overflow check has counted
		ahead int         // wanted events in [cur, scan)
		cut   bool        // the watcher overflowed at event cutAt
		cutAt uint64
		err   error // ErrResync or ErrClosed: nothing more to read
		// closed: Close ran (err may be ErrResync from before).
		closed bool
	}
}

// ringPos is a position in the ring: batch seq, event pos within it, and
// n, the number of that event in the stream of all events published.
type ringPos struct {
	seq uint64
	pos int
	n   uint64
}

// Watch subscribes to the changes made by batches applied after the current
// index (Watcher.Start). A read of the tree after Watch returns sees every
// batch up to Start applied, so watching first and reading second misses
// no change: the watcher delivers the batches after Start, some of which
// the read may hold already (compare their Index with the read's). Deletes
// of a subtree produce one event per node, children first; a move
// produces one event for the moved node. Apply never
// waits for a watcher: one that falls more than its Buffer behind is cut
// off and its Err is ErrResync; it must then re-read what it needs and
// watch again. Close it when done: a watcher nobody closes keeps its
// filter's events recorded.
func (t *Tree) Watch(opts WatchOptions) *Watcher {
	return t.watch(opts, 0)
}

// watch registers a watcher that skips the batches up to after.
func (t *Tree) watch(opts WatchOptions, after uint64) *Watcher {
	n := opts.Buffer
	if n <= 0 {
		n = DefaultWatchBuffer
	}
	w := &Watcher{t: t, f: newFilter(opts), buffer: n, done: make(chan struct{})}
	// Without Tree.mu (the applier would have to wake every watcher
	// blocked on it): the filter is published first, so every batch that
	// Apply begins after it records the events w wants; the cursor is the
	// ring's head then, so w reads every batch published after; and w
	// starts at the batch Apply is at after that, skipping its events
	// (published or not, recorded for w or not): every later batch begins
	// after the filter and publishes after the cursor. Apply stores the
	// batch it is at under Tree.mu, so a read after Watch (it takes mu)
	// sees every batch w skips.
	w.mu.cur = t.hub.register(w, &t.ring)
	w.mu.scan = w.mu.cur
	w.start = t.applying.Load()
	w.after = max(after, w.start)
	return w
}

// Next returns the watcher's next event, waiting for one until ctx ends
// (then it returns context.Cause(ctx)). Once the watcher is cut off it
// returns ErrResync, and ErrClosed after Close. After a Load the watcher
// receives an OpResync event, then ErrResync.
func (w *Watcher) Next(ctx context.Context) (Event, error) {
	for {
		ev, ok, seen, err := w.tryNext()
		if ok || err != nil {
			return ev, err
		}
		u := current(&w.g.wake)
		wt, ok := u.join()
		if !ok {
			continue // fired meanwhile
		}
		if w.t.ring.head.Load() > seen {
			u.leave(wt) // published meanwhile
			continue
		}
		select {
		case <-wt.ch:
		case <-w.done:
		case <-ctx.Done():
			u.leave(wt)
			return Event{}, context.Cause(ctx)
		}
		u.leave(wt) // passes the wake-up on
	}
}

// TryNext is Next without waiting: ok is false when no event is ready.
func (w *Watcher) TryNext() (ev Event, ok bool, err error) {
	ev, ok, _, err = w.tryNext()
	return ev, ok, err
}

// tryNext also returns the ring head the watcher has read up to.
func (w *Watcher) tryNext() (Event, bool, uint64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.err != nil {
		return Event{}, false, 0, w.mu.err
	}
	w.checkOverflowLocked()
	b, e, ok := w.seekLocked()
	switch {
	case !ok:
		return Event{}, false, 0, w.failLocked(ErrResync)
	case e != nil:
		c := &w.mu.cur
		if w.mu.cut && c.n == w.mu.cutAt {
			return Event{}, false, 0, w.failLocked(ErrResync)
		}
		if c.n < w.mu.scan.n {
			w.mu.ahead--
		}
		c.pos++
		c.n++
		return e.event(b.keys), true, 0, nil
	case b != nil: // the tree was replaced
		w.mu.err = ErrResync
		w.mu.b = nil
		w.mu.cur.seq++
		return Event{Index: b.index, Op: OpResync}, true, 0, nil
	}
	return Event{}, false, w.mu.cur.seq, nil
}

// seekLocked moves the cursor past the events w does not want, to the next
// one it wants (returned with its batch, not consumed), to a resync mark
// (its batch, e nil), or to the end of what is published (both nil). ok is
// false when the ring has dropped the batch at the cursor.
func (w *Watcher) seekLocked() (b *watchBatch, e *watchEvent, ok bool) {
	r := &w.t.ring
	c := &w.mu.cur
	var head uint64
	for {
		b = w.mu.b
		if b == nil {
			if head <= c.seq {
				if head = r.head.Load(); head <= c.seq {
					return nil, nil, true
				}
			}
			if b = r.get(c.seq); b == nil {
				return nil, nil, false
			}
			w.mu.b = b
		}
		if b.resync {
			return b, nil, true
		}
		for c.pos < len(b.events) {
			if e := &b.events[c.pos]; w.wants(e) {
				return b, e, true
			}
			c.pos++
			c.n++
		}
		w.mu.b = nil
		c.seq++
		c.pos = 0
	}
}

// checkOverflowLocked finds out whether more than Buffer of w's events wait
// unread, and if so marks the first one past Buffer: w is cut off when it
// reaches it. The count is taken only when the tree has published more than
// Buffer events of any filter since the last count, and each event is
// counted once.
func (w *Watcher) checkOverflowLocked() {
	if w.mu.cut {
		return
	}
	r := &w.t.ring
	s := &w.mu.scan
	if s.n < w.mu.cur.n || (s.n == w.mu.cur.n && s.seq < w.mu.cur.seq) {
		*s = w.mu.cur
		w.mu.ahead = 0
	}
	if uint64(w.mu.ahead)+r.total.Load()-s.n <= uint64(w.buffer) {
		return
	}
	head := r.head.Load()
	for s.seq < head {
		b := r.get(s.seq)
		if b == nil {
			w.mu.cut, w.mu.cutAt = true, s.n
			return
		}
		for s.pos < len(b.events) {
			e := &b.events[s.pos]
			n := s.n
			s.pos++
			s.n++
			if w.wants(e) {
				if w.mu.ahead++; w.mu.ahead > w.buffer {
					w.mu.cut, w.mu.cutAt = true, n
					return
				}
			}
		}
		s.seq++
		s.pos = 0
	}
}

// failLocked ends the watcher with err.
func (w *Watcher) failLocked(err error) error {
	w.mu.err = err
	w.mu.b = nil
	w.t.hub.unregister(w)
	return err
}

func (w *Watcher) wants(e *watchEvent) bool {
	return e.index > w.after && w.f.wantsEvent(e)
}

// Start returns the index the watcher started at: it receives the events of
// batches with a higher index.
func (w *Watcher) Start() uint64 { return w.start }

// Progress reports how far the watcher has caught up while it is idle:
// when ok, every event of the batches up to index has been read, so a
// consumer with nothing to read knows it has seen the tree up to index. ok
// is false while events wait to be read, after the watcher ended, and
// before the tree reaches the index a resumed watch started after.
func (w *Watcher) Progress() (index uint64, ok bool) {
	// Apply publishes a batch's events before it counts the batch applied,
	// so with nothing to read after reading the index, they were all read.
	index = w.t.applied.Load()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.err != nil || index < w.after {
		return 0, false
	}
	w.checkOverflowLocked()
	if w.mu.cut {
		return 0, false
	}
	if b, _, ok := w.seekLocked(); !ok || b != nil {
		return 0, false
	}
	return index, true
}

// Err returns ErrResync once the watcher has been cut off for falling
// behind (the events before the cut may still wait to be read) or because
// Load replaced the tree, and nil otherwise.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.mu.err {
	case ErrClosed:
		return nil
	case nil:
	default:
		return w.mu.err
	}
	w.checkOverflowLocked()
	if w.mu.cut {
		return ErrResync
	}
	if _, _, ok := w.seekLocked(); !ok {
		return w.failLocked(ErrResync)
	}
	return nil
}

// Close ends the watcher: events not yet read are dropped, a waiting Next
// returns ErrClosed, and so do later ones. It is idempotent.
func (w *Watcher) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.closed {
		return
	}
	w.mu.closed = true
	if w.mu.err == nil {
		w.failLocked(ErrClosed)
	}
	close(w.done)
}

// watchFilter is what a watcher selects.
type watchFilter struct{ prefix, kind string }

func newFilter(opts WatchOptions) watchFilter {
	prefix := opts.Prefix
	if prefix == "/" {
		prefix = ""
	}
	return watchFilter{prefix: prefix, kind: opts.Kind}
}

func (f watchFilter) wants(path, kind, to string) bool {
	if f.kind != "" && f.kind != kind {
		return false
	}
	if f.prefix == "" || under(path, f.prefix) {
		return true
	}
	return to != "" && (under(to, f.prefix) || under(f.prefix, path) || under(f.prefix, to))
}

func (f watchFilter) wantsEvent(e *watchEvent) bool { return f.wants(e.path, e.kind, e.to) }

// watchGroup is the watchers of one filter and Buffer: the applier
// evaluates each filter once per event, and the notifier wakes a group
// once per batch it matched.
type watchGroup struct {
	// The applier's, read at every batch.
	key groupKey
	hit uint64 // the last batch (hitMark) that matched it
	_   cacheLinePad
	// The watchers'.
	wake atomic.Pointer[wakeup]
	// n counts its watchers; -1 once the hub has dropped it (a watcher
	// that finds it so registers through the hub's lock).
	n atomic.Int64
	_ cacheLinePad
}

type groupKey struct {
	f      watchFilter
	buffer int
}

// acquire counts one more watcher, unless the group is being dropped.
func (g *watchGroup) acquire() bool {
	for {
		c := g.n.Load()
		if c <= 0 {
			return false
		}
		if g.n.CompareAndSwap(c, c+1) {
			return true
		}
	}
}

// watchHub registers watchers and tells the applier, through view, which
// filters to record events for and how many events the ring keeps. A
// watcher of a filter and Buffer already watched comes and goes without
// its lock (counted in its group): watchers cut off together would
// otherwise queue on it by the thousand.
type watchHub struct {
	// view is read by the applier at every batch and changes only when a
	// group or the ring's bound does: a line of its own, away from what
	// watchers write as they come and go.
	view atomic.Pointer[hubView]
	_    cacheLinePad

	gen    atomic.Uint64 // bumped when Load drops every watcher
	mu     sync.Mutex    // guards groups and notify, and changes view
	groups map[groupKey]*watchGroup
	notify *notifier // runs while there are groups
	_      cacheLinePad
}

// cacheLinePad keeps what the applier writes at every batch and what
// watchers write off each other's cache lines (a line written by the one
// and read by the other costs the applier a miss per batch).
type cacheLinePad struct{ _ [128]byte }

// hubView is the hub as the applier reads it at the start of a batch.
type hubView struct {
	groups []*watchGroup // none without watchers
	byKey  map[groupKey]*watchGroup
	hold   int       // events the ring keeps: twice the largest Buffer
	notify *notifier // wakes the watchers; nil without watchers
}

var emptyHubView = &hubView{}

func (h *watchHub) load() *hubView {
	if v := h.view.Load(); v != nil {
		return v
	}
	return emptyHubView
}

// register adds w and returns the ring position it reads from: the head
// as of its registration, which Load's resync mark cannot slip between.
func (h *watchHub) register(w *Watcher, r *watchRing) ringPos {
	key := groupKey{w.f, w.buffer}
	// Load bumps gen before it publishes its mark: with gen unchanged
	// around reading the head, the mark comes after the position, and w
	// reads it.
	gen := h.gen.Load()
	if g := h.load().byKey[key]; g != nil && g.acquire() {
		pos := ringPos{seq: r.head.Load(), n: r.total.Load()}
		if h.gen.Load() == gen {
			w.g, w.gen = g, gen
			return pos
		}
		g.n.Add(-1) // dropped by Load meanwhile
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.groups == nil {
		h.groups = map[groupKey]*watchGroup{}
	}
	g := h.groups[key]
	changed := g == nil
	switch {
	case changed:
		g = &watchGroup{key: key}
		g.n.Store(1)
		h.groups[key] = g
	case !g.acquire():
		g.n.Store(1) // its last watcher left and waits for the lock to drop it
	}
	w.g, w.gen = g, h.gen.Load()
	if h.notify == nil {
		h.notify = startNotifier(h, r)
	}
	if changed {
		h.publishLocked()
	}
	return ringPos{seq: r.head.Load(), n: r.total.Load()}
}

// unregister removes w; the last watcher of its group drops the group,
// and the last group's stops the notifier and waits for it to return.
func (h *watchHub) unregister(w *Watcher) {
	g := w.g
	if w.gen != h.gen.Load() || g.n.Add(-1) != 0 {
		return // dropped by Load already, or others remain
	}
	h.mu.Lock()
	var stop *notifier
	if g.n.CompareAndSwap(0, -1) { // no watcher came back meanwhile
		delete(h.groups, g.key)
		stop = h.takeNotifierLocked()
		h.publishLocked()
	}
	h.mu.Unlock()
	if stop != nil {
		stop.close()
	}
}

// takeNotifierLocked returns the notifier once no group is left, for the
// caller to stop after releasing h.mu.
func (h *watchHub) takeNotifierLocked() *notifier {
	if len(h.groups) > 0 || h.notify == nil {
		return nil
	}
	n := h.notify
	h.notify = nil
	return n
}

// publishLocked replaces the applier's view after the groups changed.
func (h *watchHub) publishLocked() {
	v := &hubView{groups: slices.Collect(maps.Values(h.groups)), byKey: maps.Clone(h.groups), notify: h.notify}
	for k := range h.groups {
		v.hold = max(v.hold, 2*min(k.buffer, 1<<40))
	}
	h.view.Store(v)
}

// watchTap collects the events of one filter as batches apply: the private
// tree a resumed watch replays the log on has one instead of watchers.
type watchTap struct {
	f   watchFilter
	evs []Event
}

// beginEvents takes the hub's view for the batch about to apply. Tree.mu
// is held for writing.
func (t *Tree) beginEvents() {
	t.wv = t.hub.load()
	t.wOn = t.tap != nil || len(t.wv.groups) > 0
	t.hitMark++
	if len(t.wv.groups) == 0 && t.ring.held > 0 {
		t.ring.reset() // nobody is left to read what it holds
	}
}

// wanted reports whether a watcher (or the tap) wants an event about
// path/kind, so that events are recorded only when someone listens, and
// notes the groups to wake.
func (t *Tree) wanted(path, kind, to string) bool {
	hit := t.tap != nil && t.tap.f.wants(path, kind, to)
	for _, g := range t.wv.groups {
		if g.key.f.wants(path, kind, to) {
			hit = true
			if g.hit != t.hitMark {
				g.hit = t.hitMark
				t.hits = append(t.hits, g)
			}
		}
	}
	return hit
}

// resyncAll tells every watcher the tree was replaced (Load): they read the
// resync mark after the events before it, then ErrResync. Tree.mu is held
// for writing.
func (t *Tree) resyncAll(index uint64) {
	h := &t.hub
	h.mu.Lock() // a watcher registers before the mark and is dropped, or after
	h.gen.Add(1)
	for _, g := range h.groups {
		g.n.Store(-1)
	}
	if v := h.load(); len(v.groups) > 0 {
		t.ring.publish(&watchBatch{index: index, resync: true}, v.hold)
	}
	for _, g := range h.groups {
		wake(&g.wake, relayWidth())
	}
	clear(h.groups)
	stop := h.takeNotifierLocked()
	h.publishLocked()
	h.mu.Unlock()
	if stop != nil {
		stop.close()
	}
}
