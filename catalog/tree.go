package catalog

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// Tree is the replicated in-memory catalog: a tree of nodes with indexes and
// watches, changed only by Apply (and replaced by Load).
//
// Concurrency: Apply and Load must be called from one goroutine at a time
// (the journal's apply loop). Every other method is safe for concurrent use
// with them and with each other. Reads see the tree between two batches,
// never inside one. Point reads (Get, GetID, Children) hold a read lock for
// their own duration, and Read for its callback's; long reads (OfKind, Find, Save) read at one index but
// take the lock for a bounded chunk at a time, so they never stall Apply for
// long. A Tree owns one goroutine while it has watchers, the watch
// notifier (the last Watcher.Close stops it and waits); Load decodes on the
// caller's goroutine and links on a second one, which has exited when Load
// returns.
type Tree struct {
	// applyMu serialises Apply and Load; it guards the applier scratch
	// below and makes t.s and its counters safe to read for the holder.
	applyMu sync.Mutex

	mu sync.RWMutex
	s  *state // replaced whole by Load; changed only with both locks held

	// Applier scratch, used only with applyMu held.
	dec     decoder
	ops     []rawOp
	undo    []undoRec
	undoOld []layout.Rec
	undoIdx []*secIndex
	// undoLinks holds the ownerships a batch made or removed (owner.go);
	// ended the owners whose version the current operation ended.
	undoLinks []ownLink
	ended     []ownerEnd
	// noUndo says the cascade in progress keeps no undo records, and
	// undoCut that one in this batch did (see cascadeCannotFail).
	noUndo, undoCut bool
	// ownEnds and ownPathBuf are endOwned's scratch.
	ownEnds    []ownedEnd
	ownPathBuf []byte
	// undoSize is the state's size before the batch (rollback restores it).
	undoSize int64
	cattrs   []createAttr
	buf      []byte // blob scratch
	vbuf     []byte // value scratch
	attrs    []attrEnt
	pc       layout.PathCache
	dg       digester // the digest's scratch (digest.go)
	dg0      sum256   // the digest at the start of the batch, for rollback

	// Watch scratch of the batch being applied (see watchring.go).
	pend    []pendEvent   // its events so far
	wbuf    []byte        // their paths and blobs
	wv      *hubView      // the watchers as of the batch start
	wOn     bool          // someone may want events
	hitMark uint64        // counts batches, to note each group hit once
	hits    []*watchGroup // the groups its events matched
	tap     *watchTap     // a replay's collector, instead of watchers
	slabs   watchSlabs

	hub  watchHub  // the watchers
	ring watchRing // the events published to them
	// applying is the index of the batch Apply is at (or last was at);
	// applied the last one whose events are published. Watchers read them
	// without taking mu, which would make the applier wake them.
	applying, applied atomic.Uint64
	// beforeApplyLock, set only by the package's tests, runs in Apply
	// before it takes mu.
	beforeApplyLock func()

	quota quotaHolder
	// maxFormat is LimitFormat's max (0: NewestBatchVersion), read by
	// CheckProposal without applyMu.
	maxFormat atomic.Int32
}

// New returns an empty tree holding only the root "/" (id 1) at index 0.
func New() *Tree {
	s := newState()
	s.digest, s.digestFormat = s.computeDigest(NewestDigest), NewestDigest
	return &Tree{s: s}
}

// Index returns the log index of the last applied batch (0 for a new tree).
func (t *Tree) Index() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.s.index
}

// Len returns the number of nodes, the root included.
func (t *Tree) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return int(t.s.NSlots) - len(t.s.Free)
}

// Get returns a copy of the node at path.
func (t *Tree) Get(path string) (Node, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	slot, ok := t.s.Resolve(path)
	if !ok {
		return Node{}, false
	}
	r := t.s.At(slot)
	return t.s.nodeFrom(r, strings.Clone(path), t.s.parentID(r)), true
}

// GetID returns a copy of the node with the given id.
func (t *Tree) GetID(id uint64) (Node, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	slot, ok := t.s.LookupID(id)
	if !ok {
		return Node{}, false
	}
	return t.s.node(slot), true
}

// Children returns the names of the children of the node at path, in
// increasing byte order (nil if it has none or does not exist).
func (t *Tree) Children(path string) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	slot, ok := t.s.Resolve(path)
	if !ok {
		return nil
	}
	kids := t.s.KidsOf(slot)
	if len(kids) == 0 {
		return nil
	}
	names := make([]string, len(kids))
	for i, k := range kids {
		names[i] = string(t.s.Name(k))
	}
	return names
}

// OfKind returns all nodes of a kind, in increasing id order, as of one
// index.
func (t *Tree) OfKind(kind string) []Node {
	return t.collect(func(s *state) ([]uint32, func(*state, *layout.Rec) bool) {
		k, ok := s.kindIdx[kind]
		if !ok || k == 0 {
			return nil, nil
		}
		return s.kindSets[k].AppendTo(nil), nil
	})
}

// Find returns the nodes of a kind whose attribute attr equals v, in
// increasing id order, as of one index. It uses the secondary index on
// (kind, attr) when one exists and scans the nodes of the kind otherwise.
func (t *Tree) Find(kind, attr string, v Value) []Node {
	if v.typ == TypeInvalid {
		return nil
	}
	want := appendValue(nil, v)
	return t.collect(func(s *state) ([]uint32, func(*state, *layout.Rec) bool) {
		k, ok := s.kindIdx[kind]
		if !ok || k == 0 {
			return nil, nil
		}
		key, ok := s.keyIdx[attr]
		if !ok {
			return nil, nil
		}
		if x := s.indexes[[2]uint32{k, key}]; x != nil {
			p := x.post[string(want)]
			if p == nil {
				return nil, nil
			}
			return p.AppendTo(nil), nil
		}
		return s.kindSets[k].AppendTo(nil), func(s *state, r *layout.Rec) bool {
			_, attrs := layout.SplitBlob(s.Blob(r))
			got, ok := codec.AttrValue(attrs, key)
			return ok && string(got) == string(want)
		}
	})
}

// collect runs a long read: pick chooses the ids (and an optional filter)
// under the lock; small results are materialized at once, large ones in
// chunks at the same index.
func (t *Tree) collect(pick func(s *state) ([]uint32, func(*state, *layout.Rec) bool)) []Node {
	var out []Node
	t.mu.RLock()
	s := t.s
	slots, keep := pick(s)
	if len(slots) <= longChunk {
		// Siblings often come together (a tablet's replicas): reuse the
		// parent's path.
		lastParent, lastPath := ^uint32(0), ""
		for _, slot := range slots {
			r := s.At(slot)
			if keep != nil && !keep(s, r) {
				continue
			}
			if r.Parent != lastParent {
				lastParent, lastPath = r.Parent, s.PathOf(r.Parent)
			}
			name, _ := layout.SplitBlob(s.Blob(r))
			path := lastPath + "/" + string(name)
			if lastPath == "/" {
				path = path[1:]
			}
			out = append(out, s.nodeFrom(r, path, s.At(r.Parent).ID))
		}
		t.mu.RUnlock()
	} else {
		t.mu.RUnlock()
		// Registering a long read takes the write lock (briefly); the
		// pick is redone under it so that it belongs to the read's index.
		t.mu.Lock()
		s = t.s
		slots, keep = pick(s)
		s.lr.active[s.index]++
		lr := &longRead{t: t, s: s, v: s.index, lastParent: ^uint32(0)}
		t.mu.Unlock()
		out = lr.nodes(slots, keep)
		lr.end()
	}
	// Slots are private and reused: order by id, which every replica shares.
	slices.SortFunc(out, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
