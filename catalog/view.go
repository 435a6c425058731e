package catalog

import (
	"encoding/binary"
	"iter"
	"unsafe"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// Reads without copies. Tree.Read runs a function under the tree's read
// lock and hands it a Reader; the Views it returns point into the tree's
// storage instead of copying the node into a Node (a path string, a name
// string and a map of attributes each). Nothing on these paths allocates:
// lookups, iteration over children, subtrees and index matches, and
// attribute access by name.
//
// Holding the read lock is what makes the views consistent: Apply takes the
// write lock for a whole batch, so everything read inside one Read call is
// the tree at one index. The price is that Apply waits while a Read runs, and
// so do readers that arrive after Apply started waiting (sync.RWMutex lets a
// waiting writer go first); a Read is meant for point reads and short
// scans. Long scans that must not stall the applier use OfKind and Find,
// which read at one index in bounded chunks (longread.go).

// Read calls fn with a Reader of the tree as of one index: every read fn
// makes through it sees the tree between the same two batches. fn runs with
// the tree's read lock held, so it must be short, and it must not call the
// Tree's own methods (a second read lock deadlocks once Apply waits for the
// first) nor keep the Reader or its Views after it returns. Strings the
// Views return (names, kinds, attribute keys and values) view the tree's
// storage, which is append-only: they stay valid and unchanged after fn
// returns, and keep that storage alive while they are held.
func (t *Tree) Read(fn func(r Reader)) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	fn(Reader{s: t.s})
}

// Reader reads the tree inside Tree.Read. Its methods do not allocate.
type Reader struct {
	s *state
}

// Index returns the log index of the last batch the Reader sees.
func (r Reader) Index() uint64 { return r.s.index }

// Len returns the number of nodes, the root included.
func (r Reader) Len() int { return int(r.s.NSlots) - len(r.s.Free) }

// Root returns the root node.
func (r Reader) Root() View { return r.s.view(layout.RootSlot) }

// Get returns the node at path; ok is false if there is none or path is not
// a valid path (ValidPath says why).
func (r Reader) Get(path string) (v View, ok bool) {
	slot, ok := r.s.Resolve(path)
	if !ok {
		return View{}, false
	}
	return r.s.view(slot), true
}

// GetID returns the node with the given id.
func (r Reader) GetID(id uint64) (v View, ok bool) {
	slot, ok := r.s.LookupID(id)
	if !ok {
		return View{}, false
	}
	return r.s.view(slot), true
}

// OfKind yields the nodes of a kind, in an order private to this process
// (not by id: sorting would need a copy; OfKind on the Tree sorts).
func (r Reader) OfKind(kind string) iter.Seq[View] {
	return func(yield func(View) bool) { r.ofKind(kind, yield) }
}

func (r Reader) ofKind(kind string, yield func(View) bool) {
	k, ok := r.s.kindIdx[kind]
	if !ok || k == 0 {
		return
	}
	r.s.kindSets[k].Range(func(slot uint32) bool {
		return yield(r.s.view(slot))
	})
}

// Find yields the nodes of a kind whose attribute attr equals v, in an order
// private to this process, through the secondary index on (kind, attr) when
// one exists and by scanning the nodes of the kind otherwise.
func (r Reader) Find(kind, attr string, v Value) iter.Seq[View] {
	return func(yield func(View) bool) { r.find(kind, attr, v, yield) }
}

func (r Reader) find(kind, attr string, v Value, yield func(View) bool) {
	if v.typ == TypeInvalid {
		return
	}
	s := r.s
	k, ok := s.kindIdx[kind]
	if !ok || k == 0 {
		return
	}
	key, ok := s.keyIdx[attr]
	if !ok {
		return
	}
	// The encoded value, on the stack unless it is a long string.
	var scratch [64]byte
	want := appendValue(scratch[:0], v)
	set := s.kindSets[k]
	filter := true
	if x := s.indexes[[2]uint32{k, key}]; x != nil {
		if set = x.post[string(want)]; set == nil {
			return
		}
		filter = false
	}
	set.Range(func(slot uint32) bool {
		if filter {
			_, attrs := layout.SplitBlob(s.Blob(s.At(slot)))
			got, ok := codec.AttrValue(attrs, key)
			if !ok || string(got) != string(want) {
				return true
			}
		}
		return yield(s.view(slot))
	})
}

// View is one node inside Tree.Read, read in place. The zero View is not a
// node; Views come from a Reader or another View.
type View struct {
	s    *state
	r    *layout.Rec
	slot uint32
}

// ID returns the node's id (the root is 1).
func (v View) ID() uint64 { return v.r.ID }

// ParentID returns the parent's id, 0 for the root.
func (v View) ParentID() uint64 { return v.s.parentID(v.r) }

// Parent returns the parent node; ok is false for the root.
func (v View) Parent() (p View, ok bool) {
	if v.r.ID == layout.RootID {
		return View{}, false
	}
	return v.s.view(v.r.Parent), true
}

// Name returns the node's name ("" for the root).
func (v View) Name() string {
	name, _ := layout.SplitBlob(v.s.Blob(v.r))
	return viewString(name)
}

// Kind returns the node's kind ("" for the root).
func (v View) Kind() string { return v.s.kinds[v.r.Kind] }

// Created returns the log index of the batch that created the node.
func (v View) Created() uint64 { return v.r.Created }

// Modified returns the log index of the batch that last changed the node.
func (v View) Modified() uint64 { return v.r.Modified }

// AppendPath appends the node's path ("/db1/orders", "/" for the root) to b.
func (v View) AppendPath(b []byte) []byte {
	if v.r.ID == layout.RootID {
		return append(b, '/')
	}
	var stack [32]*layout.Rec
	anc := stack[:0]
	for c := v.r; c.ID != layout.RootID; c = v.s.At(c.Parent) {
		anc = append(anc, c)
	}
	for i := len(anc) - 1; i >= 0; i-- {
		name, _ := layout.SplitBlob(v.s.Blob(anc[i]))
		b = append(b, '/')
		b = append(b, name...)
	}
	return b
}

// Path returns the node's path; it allocates the string (AppendPath does
// not, given room).
func (v View) Path() string { return string(v.AppendPath(nil)) }

// Attr returns the value of the attribute key; ok is false if the node has
// none. A string or bytes value views the tree's storage (see Tree.Read).
func (v View) Attr(key string) (val Value, ok bool) {
	k, ok := v.s.keyIdx[key]
	if !ok {
		return Value{}, false
	}
	_, attrs := layout.SplitBlob(v.s.Blob(v.r))
	b, ok := codec.AttrValue(attrs, k)
	if !ok {
		return Value{}, false
	}
	return viewValue(b), true
}

// NumAttrs returns the number of attributes.
func (v View) NumAttrs() int {
	_, attrs := layout.SplitBlob(v.s.Blob(v.r))
	n, _ := binary.Uvarint(attrs)
	return int(n)
}

// Attrs yields the attributes in increasing key order.
func (v View) Attrs() iter.Seq2[string, Value] {
	return func(yield func(string, Value) bool) { v.attrs(yield) }
}

func (v View) attrs(yield func(string, Value) bool) {
	_, attrs := layout.SplitBlob(v.s.Blob(v.r))
	it := codec.NewAttrIter(attrs)
	for {
		k, b, ok := it.Next()
		if !ok || !yield(v.s.keys[k], viewValue(b)) {
			return
		}
	}
}

// NumChildren returns the number of children.
func (v View) NumChildren() int { return len(v.s.Kids.List(v.r.Kids)) }

// Child returns the child named name.
func (v View) Child(name string) (c View, ok bool) {
	slot, ok := v.s.LookupKid(v.slot, layout.UnsafeBytes(name))
	if !ok {
		return View{}, false
	}
	return v.s.view(slot), true
}

// Children yields the children in increasing name (byte) order.
func (v View) Children() iter.Seq[View] {
	return func(yield func(View) bool) { v.children(yield) }
}

// children yields the children in list order. Siblings' recs and names
// lie apart (among their descendants'), so each child is a cache miss; the
// loop's iterations are independent, so the processor's out-of-order
// execution overlaps their misses without explicit read-ahead
// (BenchmarkChildren).
func (v View) children(yield func(View) bool) {
	s := v.s
	for _, slot := range s.Kids.List(v.r.Kids) {
		if !yield(s.view(slot)) {
			return
		}
	}
}

// Subtree yields the node and all its descendants, depth first, each node
// before its children and children in name order.
func (v View) Subtree() iter.Seq[View] {
	return func(yield func(View) bool) { v.subtree(yield) }
}

func (v View) subtree(yield func(View) bool) bool {
	if !yield(v) {
		return false
	}
	for _, slot := range v.s.Kids.List(v.r.Kids) {
		if !v.s.view(slot).subtree(yield) {
			return false
		}
	}
	return true
}

// Node returns a copy of the node, safe to keep after Tree.Read returns.
func (v View) Node() Node {
	return v.s.node(v.slot)
}

func (s *state) view(slot uint32) View { return View{s: s, r: s.At(slot), slot: slot} }

// viewString views arena bytes as a string without copying; arena bytes are
// never rewritten (see arena), so the string is immutable.
func viewString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// viewValue is decodeValue without the copy: a string or bytes value views
// the arena.
func viewValue(b []byte) Value {
	t := ValueType(b[0])
	switch t {
	case TypeString, TypeBytes:
		l, n := binary.Uvarint(b[1:])
		return Value{typ: t, s: viewString(b[1+n : 1+n+int(l)])}
	}
	return decodeValue(b)
}
