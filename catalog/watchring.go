package catalog

import (
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/metatree/metatree/catalog/internal/layout"
)

// The watch ring. Apply records each batch's events once, as an immutable
// watchBatch, in a ring shared by every watcher of the tree, with the
// distinct filters (watchGroup) the batch matched, and kicks the tree's
// notifier (notify.go), which wakes the waiting watchers off the applier's
// goroutine. Watchers read the ring at their own pace, filtering
// as they go, without locks: the applier's cost does not depend on how
// many watchers there are, and it never waits for one. A watcher the ring
// has moved past is cut off (ErrResync).
//
// Events are recorded raw: the fields watchers filter on and copies of the
// nodes' records and encoded names and attributes. The first watcher to
// read an event builds its Nodes, which every other watcher then shares;
// nothing is built for events nobody reads.

// watchBatch is the events of one applied batch, or the mark of a Load
// (resync). Immutable once published.
type watchBatch struct {
	seq    uint64 // position in the ring's sequence
	end    uint64 // number of the events published up to and including this batch
	index  uint64
	resync bool
	events []watchEvent
	keys   []string      // the tree's attribute key names, for building nodes
	groups []*watchGroup // the groups whose filters its events matched
	one    [1]watchEvent
	group1 [1]*watchGroup
}

// weight is what the batch counts against the ring's bound.
func (b *watchBatch) weight() int { return max(1, len(b.events)) }

// watchEvent is one recorded event.
type watchEvent struct {
	op       OpType
	index    uint64
	path, to string // the node's path (before a move or delete); the new path of a move
	kind     string
	before   rawNode
	after    rawNode
	built    atomic.Pointer[Event]
}

// rawNode is a node as recorded: its record and blob (name, attributes).
type rawNode struct {
	id, parent, created, modified uint64
	path                          string
	blob                          []byte
}

// event returns the Event, building it the first time.
func (e *watchEvent) event(keys []string) Event {
	if ev := e.built.Load(); ev != nil {
		return *ev
	}
	ev := &Event{Index: e.index, Op: e.op, Before: e.before.node(e.kind, keys), After: e.after.node(e.kind, keys)}
	if !e.built.CompareAndSwap(nil, ev) {
		ev = e.built.Load()
	}
	return *ev
}

func (r *rawNode) node(kind string, keys []string) *Node {
	if r.id == 0 {
		return nil
	}
	n := &Node{ID: r.id, Parent: r.parent, Path: r.path, Kind: kind, Created: r.created, Modified: r.modified}
	decodeBlob(r.blob, keys, n)
	return n
}

// pendNode and pendEvent are an event being recorded during a batch, its
// strings and blobs as offsets into Tree.wbuf until the batch publishes.
type pendNode struct {
	id, parent, created, modified uint64
	path, blob                    [2]int32
}

type pendEvent struct {
	op            OpType
	index         uint64
	kind          string // interned: the state keeps it alive
	before, after pendNode
}

// watchRing holds the recently published batches, by sequence number, in
// a power-of-two array of slots that grows as needed.
//
// Publication order: the slot, then total, then head; a reader that loads
// head and sees a batch's seq below it finds the batch in its slot (or the
// slot reused or cleared: the batch was dropped).
type watchRing struct {
	slots atomic.Pointer[[]atomic.Pointer[watchBatch]]
	head  atomic.Uint64 // seq of the next batch
	total atomic.Uint64 // events published, all batches together

	// The applier's: first is the oldest batch kept, held what the kept
	// batches weigh, weights what each weighs (by seq, as slots), so that
	// dropping a batch never reads it: its lines are the watchers' by then.
	// Changed with Tree.mu held for writing.
	first   uint64
	held    int
	weights []int
}

const ringMinSlots = 64

// get returns the batch seq (below head), or nil once it has been dropped.
func (r *watchRing) get(seq uint64) *watchBatch {
	sp := r.slots.Load()
	if sp == nil {
		return nil
	}
	sl := *sp
	b := sl[seq&uint64(len(sl)-1)].Load()
	if b == nil || b.seq != seq {
		return nil
	}
	return b
}

// publish appends b, then drops the oldest batches while the ring holds
// more than hold events (the newest batch stays, whatever it weighs).
func (r *watchRing) publish(b *watchBatch, hold int) {
	seq := r.head.Load()
	b.seq = seq
	b.end = r.total.Load() + uint64(len(b.events))
	r.held += b.weight()
	for r.first < seq && r.held > hold {
		r.dropFirst()
	}
	sp := r.slots.Load()
	if sp == nil || seq-r.first >= uint64(len(*sp)) {
		sp = r.grow(sp, seq)
	}
	sl := *sp
	sl[seq&uint64(len(sl)-1)].Store(b)
	r.weights[seq&uint64(len(sl)-1)] = b.weight()
	r.total.Store(b.end)
	r.head.Store(seq + 1)
}

func (r *watchRing) dropFirst() {
	sl := *r.slots.Load()
	i := r.first & uint64(len(sl)-1)
	r.held -= r.weights[i]
	r.weights[i] = 0
	sl[i].Store(nil)
	r.first++
}

// grow returns a slot array with room for the batches first..seq, the kept
// ones copied in.
func (r *watchRing) grow(old *[]atomic.Pointer[watchBatch], seq uint64) *[]atomic.Pointer[watchBatch] {
	n := ringMinSlots
	for uint64(n) <= seq-r.first {
		n *= 2
	}
	sl := make([]atomic.Pointer[watchBatch], n)
	weights := make([]int, n)
	if old != nil {
		o := *old
		for s := r.first; s < seq; s++ {
			sl[s&uint64(n-1)].Store(o[s&uint64(len(o)-1)].Load())
			weights[s&uint64(n-1)] = r.weights[s&uint64(len(o)-1)]
		}
	}
	r.weights = weights
	r.slots.Store(&sl)
	return &sl
}

// reset drops every batch (no watcher is left to read them).
func (r *watchRing) reset() {
	for r.first < r.head.Load() {
		r.dropFirst()
	}
	r.held = 0
}

// notePath copies a path into the batch's bytes.
func (t *Tree) notePath(p string) [2]int32 {
	at := len(t.wbuf)
	t.wbuf = append(t.wbuf, p...)
	return [2]int32{int32(at), int32(len(t.wbuf))}
}

// noteNode records the node r, at the path recorded at path.
func (t *Tree) noteNode(s *state, r *layout.Rec, parentID uint64, path [2]int32) pendNode {
	at := len(t.wbuf)
	t.wbuf = append(t.wbuf, s.Blob(r)...)
	return pendNode{id: r.ID, parent: parentID, created: r.Created, modified: r.Modified,
		path: path, blob: [2]int32{int32(at), int32(len(t.wbuf))}}
}

func bufString(buf []byte, at [2]int32) string {
	if at[0] == at[1] {
		return ""
	}
	return unsafe.String(&buf[at[0]], int(at[1]-at[0]))
}

func (p *pendNode) raw(buf []byte) rawNode {
	if p.id == 0 {
		return rawNode{}
	}
	return rawNode{id: p.id, parent: p.parent, created: p.created, modified: p.modified,
		path: bufString(buf, p.path), blob: buf[p.blob[0]:p.blob[1]:p.blob[1]]}
}

// publishEvents makes the batch's recorded events visible to watchers and
// wakes those whose filters they matched. Tree.mu is held for writing.
func (t *Tree) publishEvents(s *state, index uint64) {
	if len(t.pend) == 0 {
		return
	}
	buf := t.slabs.bytes(t.wbuf)
	b := t.slabs.batch()
	b.index, b.keys = index, s.keys
	if len(t.pend) == 1 {
		b.events = b.one[:]
	} else {
		b.events = make([]watchEvent, len(t.pend))
	}
	for i := range t.pend {
		p, e := &t.pend[i], &b.events[i]
		e.op, e.index, e.kind = p.op, p.index, p.kind
		e.before, e.after = p.before.raw(buf), p.after.raw(buf)
		switch {
		case p.op == OpMove:
			e.path, e.to = e.before.path, e.after.path
		case p.after.id != 0:
			e.path = e.after.path
		default:
			e.path = e.before.path
		}
	}
	if t.tap != nil {
		for i := range b.events {
			if e := &b.events[i]; t.tap.f.wantsEvent(e) {
				t.tap.evs = append(t.tap.evs, e.event(b.keys))
			}
		}
	}
	if len(t.wv.groups) > 0 {
		switch len(t.hits) {
		case 0:
		case 1:
			b.group1[0] = t.hits[0]
			b.groups = b.group1[:]
		default:
			b.groups = slices.Clone(t.hits)
		}
		t.ring.publish(b, t.wv.hold)
		if t.wv.notify != nil {
			t.wv.notify.kick()
		}
	}
}

// watchSlabs hands out batch records and their bytes from larger blocks,
// so that publishing a batch rarely allocates. A block stays alive while
// any batch in it is referenced; what is handed out is never written again
// (the events' strings view the bytes).
type watchSlabs struct {
	batches []watchBatch
	buf     []byte
}

const (
	slabBatches = 64
	slabBytes   = 64 << 10
)

func (w *watchSlabs) batch() *watchBatch {
	if len(w.batches) == 0 {
		w.batches = make([]watchBatch, slabBatches)
	}
	b := &w.batches[0]
	w.batches = w.batches[1:]
	return b
}

// bytes returns a copy of p.
func (w *watchSlabs) bytes(p []byte) []byte {
	if len(p) > cap(w.buf)-len(w.buf) {
		w.buf = make([]byte, 0, max(slabBytes, len(p)))
	}
	at := len(w.buf)
	w.buf = append(w.buf, p...)
	return w.buf[at:len(w.buf):len(w.buf)]
}
