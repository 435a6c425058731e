package catalog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/idset"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// Apply applies the encoded batch committed at log index and returns its
// *Result (never nil). It is the state-machine face the journal drives:
// called from one goroutine, in log order, it is deterministic, so every
// replica that applies the same entries holds the same tree and assigns the
// same ids.
//
// The batch is atomic: if an operation fails (a precondition, a missing
// parent, an existing target, ...) the operations before it are rolled back,
// Result.Err is an *OpError naming it, and the tree is as before, except
// that Index advances. Bytes that do not decode are ErrMalformed (also
// advancing Index: every replica fails them alike). A batch of a format
// version this tree does not read is ErrUnknownVersion and changes nothing,
// not even Index: Result.Halt reports it, and the caller must stop rather
// than skip it. An index at or below Index() is ErrApplied and changes
// nothing.
func (t *Tree) Apply(index uint64, data []byte) any {
	res := &Result{Index: index}
	// applyMu serialises Apply and Load (and guards the scratch state), so
	// the entry is decoded and validated before taking mu: readers wait only
	// for the changes themselves.
	t.applyMu.Lock()
	defer t.applyMu.Unlock()
	if last := t.s.index; index <= last {
		res.Err = fmt.Errorf("%w: index %d, last applied %d", ErrApplied, index, last)
		return res
	}
	ops, err := t.dec.decode(data, t.ops, true)
	t.ops = ops
	if errors.Is(err, ErrUnknownVersion) {
		t.clearScratch()
		return unknownVersion(index, err)
	}
	if err == nil {
		err = validateOps(ops)
	}
	if t.beforeApplyLock != nil {
		t.beforeApplyLock()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// A watcher registering now starts at this index or above (watch.go).
	// It is stored under mu, before the batch's events begin: a watcher
	// that skips this batch is followed by reads (they take mu) that see
	// it applied.
	t.applying.Store(index)
	s := t.s
	defer s.Paths.Flush() // before readers can see the index
	if err != nil {
		s.index = index
		t.applied.Store(index)
		res.Err = err
		t.clearScratch()
		return res
	}
	s.lr.applying = index
	t.undo = t.undo[:0]
	t.undoOld = t.undoOld[:0]
	clear(t.undoIdx)
	t.undoIdx = t.undoIdx[:0]
	t.undoLinks = t.undoLinks[:0]
	t.ended = t.ended[:0]
	t.undoCut = false
	t.pc.Reset()
	t.beginEvents()
	t.undoSize = s.size
	t.dg0 = s.digest
	ids := make([]uint64, len(ops))
	q, before := t.quota.get(), s.usage()
	if q.exempts(int(data[0]), ops) {
		q = Quota{}
	}
	for i := range ops {
		id, err := t.applyOp(s, index, &ops[i])
		if err == nil && len(t.ended) > 0 {
			// The last operation's cascade, which nothing can fail
			// after, keeps no undo records: a version that owns many
			// nodes ends at the cost of their deletes alone.
			t.noUndo = i == len(ops)-1 && cascadeCannotFail(q, before, s.usage(), s.own.orphans)
			t.undoCut = t.undoCut || t.noUndo
			t.endOwned(s, index)
			t.noUndo = false
		}
		if err != nil {
			t.rollback(s)
			s.index = index
			t.applied.Store(index)
			res.Err = &OpError{Op: i, Type: ops[i].typ, Path: strings.Clone(ops[i].path), Err: err}
			t.clearScratch()
			return res
		}
		ids[i] = id
	}
	if err := checkQuota(q, before, s.usage()); err != nil {
		t.rollback(s)
		s.index = index
		t.applied.Store(index)
		res.Err = err
		t.clearScratch()
		return res
	}
	s.index = index
	res.IDs = ids
	t.publishEvents(s, index)
	t.applied.Store(index)
	t.clearScratch()
	s.maybeCompact()
	return res
}

// clearScratch drops references into the entry bytes and old nodes.
func (t *Tree) clearScratch() {
	clear(t.ops)
	clear(t.dec.kvs)
	clear(t.dec.keys)
	t.dec.Data = nil
	t.pc.Reset()
	clear(t.pend)
	t.pend = t.pend[:0]
	t.wbuf = t.wbuf[:0]
	if cap(t.wbuf) > 1<<20 {
		t.wbuf = nil
	}
	clear(t.hits)
	t.hits = t.hits[:0]
	t.wv = nil
	if cap(t.undo) > 1<<16 {
		t.undo = nil
	}
	if cap(t.undoOld) > 1<<16 {
		t.undoOld = nil
	}
	clear(t.undoIdx)
	t.ended = t.ended[:0]
	if cap(t.undoLinks) > 1<<16 {
		t.undoLinks = nil
	}
}

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConflict}, args...)...)
}

func (t *Tree) applyOp(s *state, index uint64, o *rawOp) (uint64, error) {
	switch o.typ {
	case OpCreateIndex:
		return 0, t.digestIndex(s, o, t.createIndex(s, o.kind, o.attr), true)
	case OpDropIndex:
		return 0, t.digestIndex(s, o, t.dropIndex(s, o.kind, o.attr), false)
	}
	var owner ownLink
	if o.typ == OpCreate && !o.owner.zero() {
		var err error
		if owner.owner, owner.ownerID, err = t.checkOwner(s, &o.owner); err != nil {
			return 0, err
		}
		owner.orphan = o.owner.Orphan
	}
	slot, exists := t.pc.Resolve(&s.Store, o.path, o.typ == OpCreate)
	var r *layout.Rec
	if exists {
		r = s.At(slot)
	}
	c := o.cond
	if o.typ == OpCheck && c.zero() {
		c.Exists = true
	}
	switch {
	case c.Absent && exists:
		return 0, conflict("exists (want absent)")
	case c.Exists && !exists:
		return 0, conflict("does not exist (want exists)")
	case c.Modified != 0 && !exists:
		return 0, conflict("does not exist (want modified %d)", c.Modified)
	case c.Modified != 0 && r.Modified != c.Modified:
		return 0, conflict("modified at %d (want %d)", r.Modified, c.Modified)
	case len(o.match) > 0 && !exists:
		return 0, conflict("does not exist (want attributes to match)")
	case len(o.match) > 0:
		if err := matchAttrs(s, r, o.match); err != nil {
			return 0, err
		}
	}
	switch o.typ {
	case OpCheck:
		if !exists {
			return 0, nil
		}
		return r.ID, nil
	case OpCreate:
		if exists {
			return 0, fmt.Errorf("%w: %q", ErrExists, o.path)
		}
		id, err := t.create(s, index, o)
		if err == nil && owner.ownerID != 0 {
			slot, _ := s.SlotOf(id)
			t.link(s, slot, owner)
		}
		return id, err
	}
	if !exists {
		return 0, fmt.Errorf("%w: %q", ErrNotFound, o.path)
	}
	id := r.ID
	switch o.typ {
	case OpUpdate:
		if o.kind != "" && o.kind != s.kinds[r.Kind] {
			return 0, conflict("kind is %q (want %q)", s.kinds[r.Kind], o.kind)
		}
		if err := t.update(s, index, slot, o); err != nil {
			return 0, err
		}
	case OpDelete:
		if r.Kids != 0 && !o.recursive {
			return 0, fmt.Errorf("%w (%d of them; delete with Recursive)", ErrNotEmpty, len(s.KidsOf(slot)))
		}
		t.pc.Reset()
		t.dg.subtree(s, slot, o.path, false)
		t.deleteTree(s, slot, o.path)
	case OpMove:
		parentPath, name := splitPath(o.to)
		ps, ok := t.pc.Resolve(&s.Store, parentPath, false)
		if !ok {
			return 0, fmt.Errorf("%w: parent %q of move target", ErrNotFound, parentPath)
		}
		if _, taken := s.Child(ps, layout.UnsafeBytes(name)); taken {
			return 0, fmt.Errorf("%w: move target %q", ErrExists, o.to)
		}
		t.pc.Reset()
		if err := s.RoomForKid(ps); err != nil {
			return 0, err
		}
		t.dg.moved(s, slot, o.path, false)
		t.move(s, index, slot, ps, name, o.path, o.to)
		t.dg.moved(s, slot, o.to, true)
	}
	return id, nil
}

// splitPath splits a valid non-root path into its parent path and name.
func splitPath(p string) (parent, name string) {
	i := strings.LastIndexByte(p, '/')
	if i == 0 {
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}

// createAttr is where a created node's attribute value sits in its blob.
type createAttr struct {
	key        uint32
	start, end int32
}

// attrEnt is an attribute being assembled into a blob.
type attrEnt struct {
	key        uint32
	val        []byte // encoded value
	start, end int    // where val is in the scratch buffer while it grows
}

// maxBlobBytes bounds a node's size (its name and attributes with each key
// counted by its name, see nodeSize), which depends only on replicated
// state: every replica decides alike, and Load enforces the same bound on
// the same measure, so whatever Apply accepts, Load accepts.
const maxBlobBytes = MaxAttrsBytes + MaxNameLen + 16

// encodeBlob encodes name and attributes (sorted by key name) into t.buf.
func (t *Tree) encodeBlob(name []byte, attrs []attrEnt) []byte {
	b := t.buf[:0]
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(attrs)))
	for _, a := range attrs {
		b = binary.AppendUvarint(b, uint64(a.key))
		b = append(b, a.val...)
	}
	t.buf = b
	return b
}

func (t *Tree) create(s *state, index uint64, o *rawOp) (uint64, error) {
	parentPath, name := splitPath(o.path)
	// applyOp has just looked o.path up and found it missing; if its parent
	// exists, that lookup also found where the new name goes.
	ps, pos, miss := t.pc.Miss(o.path)
	if !miss {
		var ok bool
		ps, ok = t.pc.Resolve(&s.Store, parentPath, false)
		if !ok {
			return 0, fmt.Errorf("%w: parent %q", ErrNotFound, parentPath)
		}
	}
	// The blob is written straight from the op (its keys are sorted by
	// name already); attrs records where each value landed, for indexing.
	b := binary.AppendUvarint(t.buf[:0], uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(o.set)))
	t.cattrs = t.cattrs[:0]
	size := 0 // what the keys add to len(b) for the node's size
	for j, e := range o.set {
		k := s.internKeyAt(j, e.k)
		b = binary.AppendUvarint(b, uint64(k))
		size += keyCost(e.k) - codec.UvarintLen(uint64(k))
		st := len(b)
		b = appendValue(b, e.v)
		t.cattrs = append(t.cattrs, createAttr{key: k, start: int32(st), end: int32(len(b))})
	}
	t.buf = b
	size += len(b)
	if size > maxBlobBytes { // validation keeps ops well below this
		return 0, fmt.Errorf("%w: the node's name and attributes would take %d bytes (at most %d)", ErrInvalid, size, maxBlobBytes)
	}
	if s.nextID >= layout.IDLimit {
		return 0, fmt.Errorf("%w: the tree has handed out every node id (below %d)", ErrCapacity, uint64(layout.IDLimit))
	}
	// Room in the parent's child list first: past this point nothing fails.
	if err := s.RoomForKid(ps); err != nil {
		return 0, err
	}
	s.Paths.Reserve(s, s.Paths.Len()+1)
	kind := s.internKind(o.kind)
	fromFree := len(s.Free) > 0
	slot := s.AllocSlot()
	s.preWrite(slot)
	id := s.nextID
	s.nextID++
	blob, blen := s.Arena.Put(b)
	s.size += int64(size)
	*s.At(slot) = layout.Rec{ID: id, Blob: blob, BLen: blen, Created: index, Modified: index, Parent: ps, Kind: kind}
	s.SetSlotOf(id, slot)
	key := t.pc.ChildKey(&s.Store, ps, layout.UnsafeBytes(name))
	if !miss {
		pos, _ = s.KidPos(ps, layout.UnsafeBytes(name))
	}
	s.LinkKidAt(ps, pos, slot, key)
	s.kindSets[kind].Add(slot)
	for _, x := range s.kindIndexes[kind] {
		for _, a := range t.cattrs {
			if a.key == x.key {
				x.add(b[a.start:a.end], slot)
			}
		}
	}
	t.undo = append(t.undo, undoRec{op: uCreate, slot: slot, fromFree: fromFree})
	t.dg.created(s, slot, ps, o, name)
	if t.wOn && t.wanted(o.path, o.kind, "") {
		after := t.noteNode(s, s.At(slot), s.At(ps).ID, t.notePath(o.path))
		t.pend = append(t.pend, pendEvent{op: OpCreate, index: index, kind: s.kinds[kind], after: after})
	}
	return id, nil
}

// indexAdd adds the node at slot to its kind set and secondary indexes.
func (s *state) indexAdd(slot uint32) {
	r := s.At(slot)
	s.kindSets[r.Kind].Add(slot)
	s.secAdd(slot)
}

// indexRemove is indexAdd's inverse.
func (s *state) indexRemove(slot uint32) {
	r := s.At(slot)
	s.kindSets[r.Kind].Remove(slot)
	s.secRemove(slot)
}

func (s *state) secRemove(slot uint32) {
	r := s.At(slot)
	if xs := s.kindIndexes[r.Kind]; len(xs) > 0 {
		_, attrs := layout.SplitBlob(s.Blob(r))
		for _, x := range xs {
			if v, ok := codec.AttrValue(attrs, x.key); ok {
				x.remove(v, slot)
			}
		}
	}
}

// touchesIndex reports whether an update sets or unsets an indexed key.
func touchesIndex(xs []*secIndex, o *rawOp) bool {
	for _, x := range xs {
		if _, ok := slices.BinarySearchFunc(o.set, x.keyName, func(e kv, k string) int { return strings.Compare(e.k, k) }); ok {
			return true
		}
		if _, ok := slices.BinarySearch(o.unset, x.keyName); ok {
			return true
		}
	}
	return false
}

// secUpdate moves a node between postings for the indexed attributes whose
// value changed from blob a to blob b.
func (s *state) secUpdate(slot uint32, kind uint32, a, b *layout.Rec) {
	xs := s.kindIndexes[kind]
	if len(xs) == 0 {
		return
	}
	_, aa := layout.SplitBlob(s.Blob(a))
	_, ba := layout.SplitBlob(s.Blob(b))
	for _, x := range xs {
		av, aok := codec.AttrValue(aa, x.key)
		bv, bok := codec.AttrValue(ba, x.key)
		if aok == bok && bytes.Equal(av, bv) {
			continue
		}
		if aok {
			x.remove(av, slot)
		}
		if bok {
			x.add(bv, slot)
		}
	}
}

func (s *state) secAdd(slot uint32) {
	r := s.At(slot)
	if xs := s.kindIndexes[r.Kind]; len(xs) > 0 {
		_, attrs := layout.SplitBlob(s.Blob(r))
		for _, x := range xs {
			if v, ok := codec.AttrValue(attrs, x.key); ok {
				x.add(v, slot)
			}
		}
	}
}

func (t *Tree) update(s *state, index uint64, slot uint32, o *rawOp) error {
	r := s.At(slot)
	t.changing(s, slot, false)
	var before pendNode
	wantEv := t.wOn && t.wanted(o.path, s.kinds[r.Kind], "")
	if wantEv {
		before = t.noteNode(s, r, s.parentID(r), t.notePath(o.path))
	}
	name, old := layout.SplitBlob(s.Blob(r))
	it := codec.NewAttrIter(old)
	// In format 2 the node's digest elements before and after are built
	// in the passes below over its attributes (digester.updating), in the
	// digester's two buffers, which nothing else uses until changed.
	var elOld, elNew []byte
	el := t.dg.updating(s)
	if el {
		elOld = elemHead(t.dg.buf, 2*len(old), r.ID, s.parentID(r), r.Created, r.Modified, s.kinds[r.Kind], name)
		elOld = binary.AppendUvarint(elOld, uint64(it.Len()))
	}
	// Merge the old attributes (sorted by key name) with set and unset
	// (sorted too).
	vals := t.vbuf[:0]
	type src struct {
		key        uint32
		name       string
		old        []byte // from the old blob, or
		start, end int    // a new value in vals
	}
	merged := make([]src, 0, 8)
	k, v, ok := it.Next()
	si, ui := 0, 0
	for ok || si < len(o.set) {
		var oldName string
		if ok {
			oldName = s.keys[k]
		}
		switch {
		case si < len(o.set) && (!ok || o.set[si].k <= oldName):
			e := o.set[si]
			st := len(vals)
			vals = appendValue(vals, e.v)
			merged = append(merged, src{key: s.internKey(e.k), name: e.k, start: st, end: len(vals)})
			if ok && e.k == oldName {
				if el {
					elOld = elemAttr(elOld, oldName, v)
				}
				k, v, ok = it.Next()
			}
			si++
		default:
			for ui < len(o.unset) && o.unset[ui] < oldName {
				ui++
			}
			if !(ui < len(o.unset) && o.unset[ui] == oldName) {
				merged = append(merged, src{key: k, name: oldName, old: v})
			}
			if el {
				elOld = elemAttr(elOld, oldName, v)
			}
			k, v, ok = it.Next()
		}
	}
	t.attrs = t.attrs[:0]
	if el {
		elNew = elemHead(t.dg.alt, len(elOld)+len(vals), r.ID, s.parentID(r), r.Created, index, s.kinds[r.Kind], name)
		elNew = binary.AppendUvarint(elNew, uint64(len(merged)))
	}
	size := 0 // what the keys add to len(b) for the node's size
	for _, m := range merged {
		val := m.old
		if val == nil {
			val = vals[m.start:m.end]
		}
		t.attrs = append(t.attrs, attrEnt{key: m.key, val: val})
		size += keyCost(m.name) - codec.UvarintLen(uint64(m.key))
		if el {
			elNew = elemAttr(elNew, m.name, val)
		}
	}
	t.vbuf = vals
	b := t.encodeBlob(name, t.attrs)
	size += len(b)
	if size > maxBlobBytes {
		return fmt.Errorf("%w: the node's name and attributes would take %d bytes (at most %d)", ErrInvalid, size, maxBlobBytes)
	}
	s.size += int64(size) - int64(s.nodeSize(s.Blob(r)))
	if !el {
		t.dg.node(s, slot, o.path, false)
	}
	blob, blen := s.Arena.Put(b)
	s.preWrite(slot)
	r = s.At(slot)
	oldRec := *r
	s.Arena.Drop(r.BLen)
	r.Blob, r.BLen = blob, blen
	r.Modified = index
	if touchesIndex(s.kindIndexes[r.Kind], o) {
		s.secUpdate(slot, r.Kind, &oldRec, r)
	}
	t.pushUndoOld(uSetBlob, slot, oldRec)
	if el {
		t.dg.changed(s, elOld, elNew)
	} else {
		t.dg.node(s, slot, o.path, true)
	}
	if wantEv {
		after := t.noteNode(s, r, before.parent, before.path)
		t.pend = append(t.pend, pendEvent{op: OpUpdate, index: index, kind: s.kinds[r.Kind], before: before, after: after})
	}
	return nil
}

// deleteTree deletes the subtree at slot, children before parents.
func (t *Tree) deleteTree(s *state, slot uint32, path string) {
	for {
		kids := s.KidsOf(slot)
		if len(kids) == 0 {
			break
		}
		k := kids[len(kids)-1]
		var kp string
		if t.wOn {
			if path == "/" {
				kp = "/" + string(s.Name(k))
			} else {
				kp = path + "/" + string(s.Name(k))
			}
		}
		t.deleteTree(s, k, kp)
	}
	r := s.At(slot)
	if t.wOn && t.wanted(path, s.kinds[r.Kind], "") {
		before := t.noteNode(s, r, s.parentID(r), t.notePath(path))
		t.pend = append(t.pend, pendEvent{op: OpDelete, index: s.lr.applying, kind: s.kinds[r.Kind], before: before})
	}
	t.changing(s, slot, true)
	t.unlink(s, slot)
	old := *r
	s.size -= int64(s.nodeSize(s.Blob(r)))
	s.indexRemove(slot)
	s.RemoveKid(old.Parent, slot)
	s.ClearSlotOf(old.ID)
	s.noteGone(old.ID, slot)
	s.preWrite(slot)
	*s.At(slot) = layout.Rec{}
	s.Free = append(s.Free, slot)
	s.Arena.Drop(old.BLen)
	t.pushUndoOld(uRemove, slot, old)
}

func (t *Tree) move(s *state, index uint64, slot, newParent uint32, newName, from, to string) {
	r := s.At(slot)
	t.changing(s, slot, false)
	var before pendNode
	wantEv := t.wOn && t.wanted(from, s.kinds[r.Kind], to)
	if wantEv {
		before = t.noteNode(s, r, s.parentID(r), t.notePath(from))
	}
	old := *r
	s.RekeyBelow(slot, false) // the descendants' paths change too
	s.RemoveKid(old.Parent, slot)
	s.preWrite(slot)
	name, attrs := layout.SplitBlob(s.Blob(r))
	if string(name) != newName {
		s.size += int64(keyCost(newName) - keyCost(string(name)))
		b := t.buf[:0]
		b = binary.AppendUvarint(b, uint64(len(newName)))
		b = append(b, newName...)
		b = append(b, attrs...)
		t.buf = b
		blob, blen := s.Arena.Put(b)
		s.Arena.Drop(old.BLen)
		r = s.At(slot)
		r.Blob, r.BLen = blob, blen
	}
	r.Parent = newParent
	r.Modified = index
	s.InsertKid(newParent, slot)
	s.RekeyBelow(slot, true)
	t.pushUndoOld(uMove, slot, old)
	if wantEv {
		after := t.noteNode(s, r, s.At(newParent).ID, t.notePath(to))
		t.pend = append(t.pend, pendEvent{op: OpMove, index: index, kind: s.kinds[r.Kind], before: before, after: after})
	}
}

func (t *Tree) createIndex(s *state, kind, attr string) error {
	k := s.internKind(kind)
	key := s.internKey(attr)
	ik := [2]uint32{k, key}
	if s.indexes[ik] != nil {
		return fmt.Errorf("%w: index on (%q, %q)", ErrExists, kind, attr)
	}
	x := &secIndex{kind: k, key: key, kindName: s.kinds[k], keyName: s.keys[key], post: map[string]*idset.Set{}}
	for _, slot := range s.kindSets[k].AppendTo(nil) {
		_, attrs := layout.SplitBlob(s.Blob(s.At(slot)))
		if v, ok := codec.AttrValue(attrs, key); ok {
			x.add(v, slot)
		}
	}
	s.addIndex(x)
	t.pushUndoIdx(uCreateIndex, x)
	return nil
}

func (s *state) addIndex(x *secIndex) {
	s.indexes[[2]uint32{x.kind, x.key}] = x
	s.kindIndexes[x.kind] = append(s.kindIndexes[x.kind], x)
}

func (s *state) removeIndex(x *secIndex) {
	delete(s.indexes, [2]uint32{x.kind, x.key})
	xs := s.kindIndexes[x.kind]
	out := xs[:0:0]
	for _, y := range xs {
		if y != x {
			out = append(out, y)
		}
	}
	if len(out) == 0 {
		delete(s.kindIndexes, x.kind)
	} else {
		s.kindIndexes[x.kind] = out
	}
}

func (t *Tree) dropIndex(s *state, kind, attr string) error {
	k, ok1 := s.kindIdx[kind]
	key, ok2 := s.keyIdx[attr]
	var x *secIndex
	if ok1 && ok2 {
		x = s.indexes[[2]uint32{k, key}]
	}
	if x == nil {
		return fmt.Errorf("%w: index on (%q, %q)", ErrNotFound, kind, attr)
	}
	s.removeIndex(x)
	t.pushUndoIdx(uDropIndex, x)
	return nil
}

type undoOp uint8

const (
	uCreate undoOp = iota + 1
	uRemove
	uSetBlob
	uMove
	uCreateIndex
	uDropIndex
	uLink   // slot became owned: aux is its link in undoLinks
	uUnlink // slot stopped being owned: aux is its link in undoLinks
)

// undoRec reverses one primitive change of a batch that failed. It is
// small and pointer-free (creates, the common case, need nothing more);
// before-images and indexes live in side lists at position aux.
type undoRec struct {
	op       undoOp
	fromFree bool // uCreate: the slot came from the free list
	slot     uint32
	aux      int32 // uRemove, uSetBlob, uMove: index in undoOld; index ops: in undoIdx
}

func (t *Tree) pushUndoOld(op undoOp, slot uint32, old layout.Rec) {
	if t.noUndo {
		return
	}
	t.undo = append(t.undo, undoRec{op: op, slot: slot, aux: int32(len(t.undoOld))})
	t.undoOld = append(t.undoOld, old)
}

// growUndo makes room in the undo log for n more nodes deleted (an undo
// record and a before-image each) and unlinked (an undo record and a
// link), so that a large cascade grows it once rather than step by step.
func (t *Tree) growUndo(n int) {
	t.undo = slices.Grow(t.undo, 2*n)
	t.undoOld = slices.Grow(t.undoOld, n)
	t.undoLinks = slices.Grow(t.undoLinks, n)
}

func (t *Tree) pushUndoIdx(op undoOp, x *secIndex) {
	t.undo = append(t.undo, undoRec{op: op, aux: int32(len(t.undoIdx))})
	t.undoIdx = append(t.undoIdx, x)
}

// rollback undoes the batch's changes in reverse order, leaving the state
// exactly as it was (slots, free list, counter and size included).
func (t *Tree) rollback(s *state) {
	if t.undoCut {
		panic("catalog: rollback after a cascade kept no undo records") // internal invariant: cascadeCannotFail
	}
	s.size = t.undoSize
	for i := len(t.undo) - 1; i >= 0; i-- {
		u := &t.undo[i]
		var old layout.Rec
		var idx *secIndex
		switch u.op {
		case uRemove, uSetBlob, uMove:
			old = t.undoOld[u.aux]
		case uCreateIndex, uDropIndex:
			idx = t.undoIdx[u.aux]
		}
		switch u.op {
		case uCreate:
			r := *s.At(u.slot)
			s.indexRemove(u.slot)
			s.RemoveKid(r.Parent, u.slot)
			s.ClearSlotOf(r.ID)
			s.preWrite(u.slot)
			*s.At(u.slot) = layout.Rec{}
			s.Arena.Drop(r.BLen)
			if u.fromFree {
				s.Free = append(s.Free, u.slot)
			} else {
				s.NSlots--
			}
			s.nextID--
		case uRemove:
			n := len(s.Free)
			if s.Free[n-1] != u.slot {
				panic("catalog: rollback: free list out of order") // internal invariant
			}
			s.Free = s.Free[:n-1]
			s.preWrite(u.slot)
			*s.At(u.slot) = old
			s.SetSlotOf(old.ID, u.slot)
			s.InsertKid(old.Parent, u.slot)
			s.indexAdd(u.slot)
			s.Arena.Undrop(old.BLen)
		case uSetBlob:
			s.preWrite(u.slot)
			r := s.At(u.slot)
			s.secRemove(u.slot)
			s.Arena.Drop(r.BLen)
			s.Arena.Undrop(old.BLen)
			r.Blob, r.BLen, r.Modified = old.Blob, old.BLen, old.Modified
			s.secAdd(u.slot)
		case uMove:
			r := s.At(u.slot)
			s.RekeyBelow(u.slot, false)
			s.RemoveKid(r.Parent, u.slot)
			s.preWrite(u.slot)
			r = s.At(u.slot)
			if r.Blob != old.Blob {
				s.Arena.Drop(r.BLen)
				s.Arena.Undrop(old.BLen)
			}
			r.Blob, r.BLen, r.Parent, r.Modified = old.Blob, old.BLen, old.Parent, old.Modified
			s.InsertKid(old.Parent, u.slot)
			s.RekeyBelow(u.slot, true)
		case uCreateIndex:
			s.removeIndex(idx)
		case uDropIndex:
			s.addIndex(idx)
		case uLink:
			s.own.remove(u.slot)
		case uUnlink:
			s.own.add(u.slot, t.undoLinks[u.aux])
		}
	}
	t.undo = t.undo[:0]
	t.undoOld = t.undoOld[:0]
	clear(t.undoIdx)
	t.undoIdx = t.undoIdx[:0]
	t.undoLinks = t.undoLinks[:0]
	t.ended = t.ended[:0]
	s.digest = t.dg0
}

// compactMin is the garbage (bytes) below which the arena is never
// compacted; a variable so that tests can make compaction frequent.
var compactMin int64 = 64 << 20

// maybeCompact rewrites the arena when most of it is garbage, unless a long
// read may still refer to old blobs.
func (s *state) maybeCompact() {
	a := &s.Arena
	if a.Garbage < compactMin || a.Garbage < a.Live || len(s.lr.active) > 0 {
		return
	}
	var na layout.Arena
	for slot := uint32(0); slot < s.NSlots; slot++ {
		r := s.At(slot)
		if r.ID == 0 {
			continue
		}
		r.Blob, r.BLen = na.Put(a.Get(r.Blob, r.BLen))
	}
	s.Arena = na
}
