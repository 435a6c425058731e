package catalog

import (
	"slices"

	"github.com/metatree/metatree/catalog/internal/imagefmt"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// Long reads (OfKind, Find, Save) must see the tree as of one index but must
// not hold the lock for their whole duration, or they would stall the
// applier. They register the index they read at, then take the read lock for
// a bounded chunk of work at a time. While any is registered the applier
// keeps the before-image of each rec it changes (the first change per batch)
// and the slot of each id it deletes, so a reader at index v can reconstruct
// any rec as of v. The cost is memory proportional to the changes made
// during the longest running read, freed when it ends; with no long read in
// progress it is one length check per write.

type histEnt struct {
	until uint64 // the batch that first changed the rec after this state
	r     layout.Rec
}

type longReads struct {
	applying uint64         // index of the batch being applied
	active   map[uint64]int // index read at -> number of readers
	hist     map[uint32][]histEnt
	gone     map[uint64]uint32 // deleted id -> its slot (ids never change slot)
}

func (l *longReads) init() {
	l.active = map[uint64]int{}
	l.hist = map[uint32][]histEnt{}
	l.gone = map[uint64]uint32{}
}

// preWrite records the current rec at slot before the applier changes it.
func (s *state) preWrite(slot uint32) {
	if len(s.lr.active) == 0 {
		return
	}
	h := s.lr.hist[slot]
	if n := len(h); n > 0 && h[n-1].until == s.lr.applying {
		return
	}
	s.lr.hist[slot] = append(h, histEnt{until: s.lr.applying, r: *s.At(slot)})
}

// noteGone records the slot of an id being deleted.
func (s *state) noteGone(id uint64, slot uint32) {
	if len(s.lr.active) == 0 {
		return
	}
	s.lr.gone[id] = slot
}

func (l *longReads) release(v uint64) {
	l.active[v]--
	if l.active[v] > 0 {
		return
	}
	delete(l.active, v)
	if len(l.active) == 0 {
		l.init()
		return
	}
	oldest := slices.Min(slicesKeys(l.active))
	for slot, h := range l.hist {
		i := 0
		for i < len(h) && h[i].until <= oldest {
			i++
		}
		if i == len(h) {
			delete(l.hist, slot)
		} else if i > 0 {
			l.hist[slot] = slices.Clone(h[i:])
		}
	}
}

func slicesKeys(m map[uint64]int) []uint64 {
	ks := make([]uint64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// longRead is one registered reader at index v. Its methods must be called
// with t.mu read-locked.
type longRead struct {
	t *Tree
	s *state
	v uint64

	// The counters and index definitions as of v.
	nextID uint64
	count  uint64
	defs   [][2]string
	links  []imagefmt.Link // the ownerships, by owned id

	lastParent uint32
	lastPath   string
}

func (t *Tree) beginLong() *longRead {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.s
	s.lr.active[s.index]++
	lr := &longRead{t: t, s: s, v: s.index, lastParent: ^uint32(0), nextID: s.nextID, count: uint64(s.NSlots) - uint64(len(s.Free))}
	for _, x := range s.indexes {
		lr.defs = append(lr.defs, [2]string{x.kindName, x.keyName})
	}
	lr.links = s.imageLinks()
	return lr
}

func (lr *longRead) end() {
	lr.t.mu.Lock()
	defer lr.t.mu.Unlock()
	lr.s.lr.release(lr.v)
}

// recAt returns the rec at slot as of the reader's index.
func (lr *longRead) recAt(slot uint32) layout.Rec {
	if h, ok := lr.s.lr.hist[slot]; ok {
		for _, e := range h {
			if e.until > lr.v {
				return e.r
			}
		}
	}
	return *lr.s.At(slot)
}

// slotOf returns the slot of id if the node existed as of the reader's index.
func (lr *longRead) slotOf(id uint64) (uint32, layout.Rec, bool) {
	slot, ok := lr.s.SlotOf(id)
	if !ok {
		slot, ok = lr.s.lr.gone[id]
		if !ok {
			return 0, layout.Rec{}, false
		}
	}
	r := lr.recAt(slot)
	return slot, r, r.ID == id
}

// nextFrom returns the first id at or after id that may have been a node
// as of the reader's index: in a page in use, or deleted since. It scans
// the deleted ids, only when the walk meets an empty page.
func (lr *longRead) nextFrom(id uint64) uint64 {
	next := lr.s.PageFrom(id)
	if next == id {
		return id
	}
	for g := range lr.s.lr.gone {
		if g >= id && g < next {
			next = g
		}
	}
	return next
}

func (lr *longRead) pathOf(slot uint32) string {
	if slot == layout.RootSlot {
		return "/"
	}
	var anc []uint32
	for c := slot; c != layout.RootSlot; {
		anc = append(anc, c)
		c = lr.recAt(c).Parent
	}
	var b []byte
	for i := len(anc) - 1; i >= 0; i-- {
		r := lr.recAt(anc[i])
		name, _ := layout.SplitBlob(lr.s.Blob(&r))
		b = append(b, '/')
		b = append(b, name...)
	}
	return string(b)
}

func (lr *longRead) node(r *layout.Rec) Node {
	var path string
	var parentID uint64
	if r.ID == layout.RootID {
		path = "/"
	} else {
		if r.Parent != lr.lastParent {
			lr.lastParent, lr.lastPath = r.Parent, lr.pathOf(r.Parent)
		}
		name, _ := layout.SplitBlob(lr.s.Blob(r))
		if lr.lastPath == "/" {
			path = "/" + string(name)
		} else {
			path = lr.lastPath + "/" + string(name)
		}
		pr := lr.recAt(r.Parent)
		parentID = pr.ID
	}
	return lr.s.nodeFrom(r, path, parentID)
}

// longChunk is how many nodes a long read handles per lock hold.
var longChunk = 512 // a variable so that tests can force tiny chunks

// nodes materializes the nodes at the given slots (as of the reader's
// index), keeping those for which keep (if set) returns true.
func (lr *longRead) nodes(slots []uint32, keep func(s *state, r *layout.Rec) bool) []Node {
	var out []Node
	for len(slots) > 0 {
		n := min(len(slots), longChunk)
		lr.t.mu.RLock()
		for _, slot := range slots[:n] {
			r := lr.recAt(slot)
			if keep != nil && !keep(lr.s, &r) {
				continue
			}
			out = append(out, lr.node(&r))
		}
		lr.t.mu.RUnlock()
		slots = slots[n:]
	}
	return out
}
