package catalog

import "slices"

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
	// Buffer is the channel capacity (default 1024). When it is full the
	// watcher is closed with ErrResync instead of blocking Apply.
	Buffer int
}

// DefaultWatchBuffer is the channel capacity of a watcher whose
// WatchOptions.Buffer is 0.
const DefaultWatchBuffer = 1024

// Watcher receives the events of one subscription. Its methods are safe for
// concurrent use.
type Watcher struct {
	t      *Tree
	prefix string
	kind   string
	start  uint64
	// after: events of batches at or below it are not delivered (a watch
	// resumed after an index this tree has not reached yet).
	after  uint64
	ch     chan Event
	sink   *[]Event // replaying watchers collect events here instead of ch
	closed bool     // guarded by t.wmu
	err    error    // guarded by t.wmu
}

// Watch subscribes to the changes made by batches applied after the current
// index (Watcher.Start). Deletes of a subtree produce one event per node,
// children first; a move produces one event for the moved node. Apply never
// blocks on a watcher: one that falls a whole buffer behind is closed and its
// Err is ErrResync; it must then re-read what it needs and watch again.
func (t *Tree) Watch(opts WatchOptions) *Watcher {
	return t.watch(opts, 0, nil)
}

// watch registers a watcher that skips the batches up to after and, with
// a sink, collects events there instead of in a channel.
func (t *Tree) watch(opts WatchOptions, after uint64, sink *[]Event) *Watcher {
	n := opts.Buffer
	if n <= 0 {
		n = DefaultWatchBuffer
	}
	if sink != nil {
		n = 0
	}
	prefix := opts.Prefix
	if prefix == "/" {
		prefix = ""
	}
	w := &Watcher{t: t, prefix: prefix, kind: opts.Kind, after: after, ch: make(chan Event, n), sink: sink}
	t.mu.RLock() // no batch is in progress while we hold it
	defer t.mu.RUnlock()
	w.start = t.s.index
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.watchers = append(slices.Clip(t.watchers), w)
	return w
}

// Events returns the channel of events; it is closed when the watcher is
// closed, by Close or because it must resync (see Err).
func (w *Watcher) Events() <-chan Event { return w.ch }

// Start returns the index the watcher started at: it receives the events of
// batches with a higher index.
func (w *Watcher) Start() uint64 { return w.start }

// Progress reports how far the watcher has caught up while it is idle:
// when ok, every event of the batches up to index has been received from
// Events, so a consumer with nothing to read knows it has seen the tree up
// to index. ok is false while events wait in the channel, after the
// watcher closed, and before the tree reaches the index a resumed watch
// started after.
func (w *Watcher) Progress() (index uint64, ok bool) {
	// Apply delivers a batch's events before readers can see its index, so
	// an empty channel after reading the index means they were all taken.
	index = w.t.Index()
	w.t.wmu.Lock()
	closed := w.closed
	w.t.wmu.Unlock()
	if closed || len(w.ch) > 0 || index < w.after {
		return 0, false
	}
	return index, true
}

// Err returns ErrResync once the watcher was dropped for falling behind or
// because Load replaced the tree, and nil otherwise.
func (w *Watcher) Err() error {
	w.t.wmu.Lock()
	defer w.t.wmu.Unlock()
	return w.err
}

// Close stops the watcher and closes its channel. It is idempotent.
func (w *Watcher) Close() {
	w.t.wmu.Lock()
	defer w.t.wmu.Unlock()
	w.t.dropLocked(w, nil)
}

// dropLocked closes w with err; t.wmu must be held.
func (t *Tree) dropLocked(w *Watcher, err error) {
	if w.closed {
		return
	}
	w.closed = true
	w.err = err
	close(w.ch)
	t.watchers = slices.DeleteFunc(slices.Clone(t.watchers), func(x *Watcher) bool { return x == w })
}

func (w *Watcher) wants(path, kind, to string) bool {
	if w.kind != "" && w.kind != kind {
		return false
	}
	if w.prefix == "" || under(path, w.prefix) {
		return true
	}
	return to != "" && (under(to, w.prefix) || under(w.prefix, path) || under(w.prefix, to))
}

func (w *Watcher) wantsEvent(ev *Event) bool {
	switch {
	case ev.Before != nil && ev.After != nil && ev.Op == OpMove:
		return w.wants(ev.Before.Path, ev.Before.Kind, ev.After.Path)
	case ev.After != nil:
		return w.wants(ev.After.Path, ev.After.Kind, "")
	case ev.Before != nil:
		return w.wants(ev.Before.Path, ev.Before.Kind, "")
	}
	return false
}

type pendingEvent struct{ ev Event }

// snapshotWatchers takes the watcher list for the batch about to apply.
func (t *Tree) snapshotWatchers() {
	t.wmu.Lock()
	t.ws = t.watchers
	t.wmu.Unlock()
}

// wanted reports whether any watcher wants an event about path/kind, so
// that nodes are materialized only when someone listens.
func (t *Tree) wanted(path, kind, to string) bool {
	for _, w := range t.ws {
		if w.wants(path, kind, to) {
			return true
		}
	}
	return false
}

// deliver sends the batch's events with non-blocking sends; a watcher
// whose buffer is full is dropped with ErrResync.
func (t *Tree) deliver() {
	if len(t.events) == 0 {
		return
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	for _, w := range t.watchers {
		for i := range t.events {
			ev := &t.events[i].ev
			if w.closed || ev.Index <= w.after || !w.wantsEvent(ev) {
				continue
			}
			if w.sink != nil {
				*w.sink = append(*w.sink, *ev)
				continue
			}
			select {
			case w.ch <- *ev:
			default:
				t.dropLocked(w, ErrResync)
			}
		}
	}
}

// resyncAll tells every watcher the tree was replaced (Load).
func (t *Tree) resyncAll(index uint64) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	for _, w := range t.watchers {
		select {
		case w.ch <- Event{Index: index, Op: OpResync}:
		default:
		}
		t.dropLocked(w, ErrResync)
	}
}
