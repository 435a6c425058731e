package catalog

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/metatree/metatree/catalog/internal/imagefmt"
	"github.com/metatree/metatree/catalog/internal/layout"
	"github.com/metatree/metatree/catalog/internal/slotmap"
)

// Owned nodes.
//
// A create can name an owner (Op.Owner): another node, and the version of
// it that owns the new node, which is the owner's Modified index, or 0 for
// the version the owner is at when the batch applies. The create is
// refused (ErrConflict) unless the owner exists and, given a version, was
// last changed at exactly that index when the batch applies. Any later
// change of the owner (an update or a move, both of which set its
// Modified) or its deletion ends that version, and the operation that ends
// it is followed, within the same operation of the same batch, by the end
// of everything the version owns, on every replica alike: each owned node
// is deleted with its subtree or, if its create asked for it
// (Owner.Orphan), kept and marked with the attribute OrphanedAttr, which
// names the index that ended the version and how (see ParseOrphanMark).
// The owned nodes go in decreasing id order, as ordinary deletes and
// updates: watchers see ordinary events at the owner's index, the digest
// and the usage follow, and a batch that fails later rolls the whole of it
// back. A marked node is no longer owned; marking it is a change, so what
// it owns in turn ends too.
//
// The heartbeat's member records are such owners: they change only
// through transitions (restart, death, return), each a proposal that bumps
// the record's generation, or through their removal; a leader change
// writes the monitor claim, not the records. So a node owned by a
// member's record at its current index lives exactly as long as the
// member's epoch, with no clock and no renewal.
//
// Fencing needs nothing more: an OpCheck on the owner with Cond.Modified
// set to the version (or a Cond.Match on what the version holds) makes a
// batch apply only while that version is current, and a create that
// names an owner's version is fenced by it implicitly.
//
// The owner index maps an owner's slot to the slots it owns and each owned
// slot back to its owner's, so ending a version costs time in proportion
// to what it owns, not to the catalog, and a link costs 12 bytes.

// Owner ties the node a create makes to a version of another node; see
// Op.Owner.
type Owner struct {
	Path string // the owner node: not the root, not the node created
	// Version is the owner's Modified index the node is tied to; 0 ties
	// it to the version the owner is at when the batch applies, which
	// every replica resolves alike. Owned returns the version resolved.
	Version uint64
	// Orphan keeps the node when the version ends, marked with
	// OrphanedAttr, instead of deleting it with its subtree.
	Orphan bool
}

func (o Owner) zero() bool { return o == Owner{} }

// OrphanedAttr is the attribute that marks a node orphaned when its
// owner's version ended: a String "<index> <reason>", the log index of the
// batch that ended the version and how it ended, OrphanOwnerChanged or
// OrphanOwnerDeleted (ParseOrphanMark reads it).
const OrphanedAttr = "_orphaned"

// The reasons an orphan mark names.
const (
	OrphanOwnerChanged = "owner changed"
	OrphanOwnerDeleted = "owner deleted"
)

// ownLink is an owned node's tie to its owner, as the applier handles it.
type ownLink struct {
	ownerID uint64 // the owner's id: images and the digest name owners by id
	owner   uint32 // and its slot
	orphan  bool
}

// ownership is the owner index. Every link's owner exists and is at the
// version the link was made at: whatever ends it removes the link in the
// same operation. So an owner's slot names it while it owns anything (a
// slot is reused only after its node is gone), and an owned node's link
// takes 12 bytes: its slot and its owner's in back, its slot in its
// owner's set.
type ownership struct {
	back    slotmap.Map            // owned slot -> owner slot
	by      map[uint32]*ownerLinks // owner slot -> what it owns
	orphans int                    // links that ask for a mark
}

// ownerLinks is what one owner owns, by what becomes of it when the
// version ends.
type ownerLinks struct {
	id     uint64      // the owner's id (kept here: it outlives the owner's rec within the operation that deletes it)
	del    slotmap.Set // owned slots deleted with their subtrees
	orphan slotmap.Set // owned slots kept and marked
}

func (o *ownerLinks) set(orphan bool) *slotmap.Set {
	if orphan {
		return &o.orphan
	}
	return &o.del
}

func (w *ownership) add(slot uint32, l ownLink) {
	if w.by == nil {
		w.by = map[uint32]*ownerLinks{}
	}
	w.back.Put(slot, l.owner)
	o := w.by[l.owner]
	if o == nil {
		o = &ownerLinks{id: l.ownerID}
		w.by[l.owner] = o
	}
	o.set(l.orphan).Add(slot)
	if l.orphan {
		w.orphans++
	}
}

// get returns slot's link.
func (w *ownership) get(slot uint32) (ownLink, bool) {
	if w.back.Len() == 0 {
		return ownLink{}, false
	}
	owner, ok := w.back.Get(slot)
	if !ok {
		return ownLink{}, false
	}
	o := w.by[owner]
	return ownLink{owner: owner, ownerID: o.id, orphan: o.orphan.Contains(slot)}, true
}

// remove removes slot's link and returns it.
func (w *ownership) remove(slot uint32) (ownLink, bool) {
	if w.back.Len() == 0 {
		return ownLink{}, false
	}
	owner, ok := w.back.Remove(slot)
	if !ok {
		return ownLink{}, false
	}
	o := w.by[owner]
	l := ownLink{owner: owner, ownerID: o.id, orphan: o.orphan.Remove(slot)}
	if l.orphan {
		w.orphans--
	} else {
		o.del.Remove(slot)
	}
	if o.del.Len() == 0 && o.orphan.Len() == 0 {
		delete(w.by, owner)
	}
	return l, true
}

// len returns the number of owned nodes.
func (w *ownership) len() int { return w.back.Len() }

// each calls fn with every link, in no particular order.
func (w *ownership) each(fn func(slot uint32, l ownLink)) {
	for owner, o := range w.by {
		o.del.Each(func(slot uint32) { fn(slot, ownLink{owner: owner, ownerID: o.id}) })
		o.orphan.Each(func(slot uint32) { fn(slot, ownLink{owner: owner, ownerID: o.id, orphan: true}) })
	}
}

// ownerEnd is an owner whose version an operation ended.
type ownerEnd struct {
	slot    uint32
	id      uint64
	deleted bool
}

// maxMarkBytes bounds what marking a node orphaned adds to Usage.Bytes:
// the attribute, its key counted by name, and a longer attribute count.
const maxMarkBytes = 64

// cascadeCannotFail reports whether a batch passes its quota check
// whatever the cascade of its last operation does, given the quota, the
// usage before the batch and the usage now: the cascade's deletes lower
// both counts, and its marks, at most one for each link that asks for
// one, raise the bytes by at most maxMarkBytes each. Then nothing after
// the cascade can fail, and it needs no undo records.
func cascadeCannotFail(q Quota, before, now Usage, orphans int) bool {
	if checkQuota(q, before, now) != nil {
		return false
	}
	most := now.Bytes + int64(orphans)*maxMarkBytes
	return q.MaxBytes <= 0 || most <= q.MaxBytes || most <= before.Bytes
}

// linkHash is the digest element of an ownership: 'O' owned:u64be
// owner:u64be orphan:byte, by node ids, which every replica assigns alike
// and images carry.
func linkHash(owned uint64, l ownLink) [sha256.Size]byte {
	var b [18]byte
	b[0] = 'O'
	binary.BigEndian.PutUint64(b[1:], owned)
	binary.BigEndian.PutUint64(b[9:], l.ownerID)
	if l.orphan {
		b[17] = 1
	}
	return sha256.Sum256(b[:])
}

// link adds (or subtracts) the element hash of slot's ownership.
func (g *digester) link(s *state, slot uint32, l ownLink, add bool) {
	if g.off {
		return
	}
	e := linkElem(s.digestFormat, s.At(slot).ID, l)
	if add {
		s.digest.plus(e)
	} else {
		s.digest.minus(e)
	}
}

// checkOwner resolves a create's owner and checks that its version is
// current; it returns the owner's slot and id.
func (t *Tree) checkOwner(s *state, o *Owner) (uint32, uint64, error) {
	// The path index first, which leaves the applier's path cache to the
	// create that follows (the owner is elsewhere in the tree); an owner
	// the batch created may wait to enter the index, which the applier's
	// lookup sees.
	slot, ok := s.Resolve(o.Path)
	if !ok {
		slot, ok = t.pc.Resolve(&s.Store, o.Path, false)
	}
	if !ok {
		return 0, 0, conflict("owner %q does not exist", o.Path)
	}
	r := s.At(slot)
	if o.Version != 0 && r.Modified != o.Version {
		return 0, 0, conflict("owner %q is at version %d, not %d (a version ends when the owner changes)", o.Path, r.Modified, o.Version)
	}
	return slot, r.ID, nil
}

// link makes slot owned.
func (t *Tree) link(s *state, slot uint32, l ownLink) {
	s.own.add(slot, l)
	t.dg.link(s, slot, l, true)
	t.undo = append(t.undo, undoRec{op: uLink, slot: slot, aux: int32(len(t.undoLinks))})
	t.undoLinks = append(t.undoLinks, l)
}

// unlink makes slot unowned, if it was owned.
func (t *Tree) unlink(s *state, slot uint32) {
	if l, ok := s.own.remove(slot); ok {
		t.unlinked(s, slot, l)
	}
}

// unlinked accounts for the link l of slot, which the index no longer
// holds: the digest and the undo log.
func (t *Tree) unlinked(s *state, slot uint32, l ownLink) {
	t.dg.link(s, slot, l, false)
	if t.noUndo {
		return
	}
	t.undo = append(t.undo, undoRec{op: uUnlink, slot: slot, aux: int32(len(t.undoLinks))})
	t.undoLinks = append(t.undoLinks, l)
}

// changing notes that the node at slot changes or goes: if it owns
// anything, the version that owns it ends.
func (t *Tree) changing(s *state, slot uint32, deleted bool) {
	if len(s.own.by) == 0 {
		return
	}
	if s.own.by[slot] != nil {
		t.ended = append(t.ended, ownerEnd{slot: slot, id: s.At(slot).ID, deleted: deleted})
	}
}

// endOwned ends what the versions noted in t.ended owned: called after
// each operation, it deletes or marks the owned nodes, in decreasing id
// order per owner; marks end further versions, which it ends in turn.
//
// It costs what the owned nodes and their subtrees cost to delete as
// ordinary deletes do (their digest elements, path index entries, child
// lists, watch events and undo records), with nothing per node beyond
// that: the owner's sets go at once, the undo log grows once or, when
// nothing after the cascade can fail, keeps nothing (cascadeCannotFail),
// paths are built in one buffer, and the nodes leave their parents' child
// lists from the end when they were created in name order.
func (t *Tree) endOwned(s *state, index uint64) {
	for i := 0; i < len(t.ended); i++ {
		e := t.ended[i]
		o := s.own.by[e.slot]
		if o == nil || o.id != e.id {
			continue
		}
		ends := slices.Grow(t.ownEnds[:0], o.del.Len()+o.orphan.Len())
		o.del.Each(func(slot uint32) { ends = append(ends, ownedEnd{id: s.At(slot).ID, slot: slot}) })
		o.orphan.Each(func(slot uint32) { ends = append(ends, ownedEnd{id: s.At(slot).ID, slot: slot, orphan: true}) })
		// Newest first: siblings created in name order then leave their
		// parent's child list from its end, which moves nothing. Slots
		// handed out by the counter follow ids, so the sets in reverse
		// are often in that order already.
		slices.Reverse(ends)
		byIDDown := func(a, b ownedEnd) int { return cmp.Compare(b.id, a.id) }
		if !slices.IsSortedFunc(ends, byIDDown) {
			slices.SortFunc(ends, byIDDown)
		}
		t.ownEnds = ends
		if !t.noUndo {
			t.growUndo(len(ends))
		}
		reason := OrphanOwnerChanged
		if e.deleted {
			reason = OrphanOwnerDeleted
		}
		var mark Value
		if o.orphan.Len() > 0 {
			mark = orphanMark(index, reason)
		}
		for _, x := range ends {
			if s.At(x.slot).ID != x.id {
				continue // gone with an earlier owned node's subtree
			}
			// The version's links all go: each from back here, with its
			// digest element and undo record (a rollback re-adds them one
			// by one), and the owner's sets at once below. (A node that
			// goes with another's subtree leaves its set as deletes do.)
			l := ownLink{owner: e.slot, ownerID: e.id, orphan: x.orphan}
			s.own.back.Remove(x.slot)
			t.unlinked(s, x.slot, l)
			path := t.ownPath(s, x.slot)
			t.pc.Reset()
			if x.orphan {
				op := rawOp{typ: OpUpdate, path: path, set: []kv{{OrphanedAttr, mark}}}
				if t.update(s, index, x.slot, &op) == nil {
					continue
				}
				// The mark does not fit the node's size limit: it goes.
			}
			t.dg.subtree(s, x.slot, path, false)
			t.deleteTree(s, x.slot, path)
		}
		s.own.orphans -= o.orphan.Len()
		delete(s.own.by, e.slot)
	}
	t.ended = t.ended[:0]
	if cap(t.ownEnds) > 1<<16 {
		t.ownEnds = nil
	}
	t.ownPathBuf = t.ownPathBuf[:0]
}

// orphanMark is the value of OrphanedAttr for a version that the batch at
// index ended for reason.
func orphanMark(index uint64, reason string) Value {
	return String(strconv.FormatUint(index, 10) + " " + reason)
}

// ParseOrphanMark reads the value of OrphanedAttr, "<index> <reason>": the
// log index of the batch that ended the owner's version, and how it ended
// (OrphanOwnerChanged, OrphanOwnerDeleted). A value that is not such a
// mark is ErrInvalid, naming what is wrong.
func ParseOrphanMark(mark string) (index uint64, reason string, err error) {
	num, reason, ok := strings.Cut(mark, " ")
	if !ok || reason == "" {
		return 0, "", fmt.Errorf("%w: orphan mark %q: want \"<index> <reason>\"", ErrInvalid, mark)
	}
	index, err = strconv.ParseUint(num, 10, 64)
	if err != nil || index == 0 || num[0] == '0' || num[0] == '+' {
		return 0, "", fmt.Errorf("%w: orphan mark %q: index %q is not a positive decimal", ErrInvalid, mark, num)
	}
	return index, reason, nil
}

// ownedEnd is an owned node whose owner's version ended.
type ownedEnd struct {
	id     uint64
	slot   uint32
	orphan bool
}

// ownPath returns the path of slot, built in a buffer the next call
// reuses: the applier's calls below copy what they keep.
func (t *Tree) ownPath(s *state, slot uint32) string {
	var stack [32]uint32
	anc := stack[:0]
	for c := slot; c != layout.RootSlot; c = s.At(c).Parent {
		anc = append(anc, c)
	}
	b := t.ownPathBuf[:0]
	for i := len(anc) - 1; i >= 0; i-- {
		b = append(b, '/')
		b = append(b, s.Name(anc[i])...)
	}
	t.ownPathBuf = b
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// Owned returns the owner of the node at path and the version that owns
// it; ok is false if the node does not exist or is not owned.
func (t *Tree) Owned(path string) (owner Owner, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := t.s
	slot, found := s.Resolve(path)
	if !found {
		return Owner{}, false
	}
	l, owned := s.own.get(slot)
	if !owned {
		return Owner{}, false
	}
	return Owner{Path: s.PathOf(l.owner), Version: s.At(l.owner).Modified, Orphan: l.orphan}, true
}

// ownedCount returns how many nodes are owned (catalogtest.OwnedCount).
func (t *Tree) ownedCount() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.s.own.len()
}

// validOwner checks a create's owner in isolation.
func (o *rawOp) validOwner() error {
	w := &o.owner
	if err := ValidPath(w.Path); err != nil {
		return fmt.Errorf("owner: %w", err)
	}
	if w.Path == "/" {
		return fmt.Errorf("%w: the root cannot own nodes", ErrInvalid)
	}
	if w.Path == o.path || under(w.Path, o.path) {
		return fmt.Errorf("%w: owner %q is the node created or below it", ErrInvalid, w.Path)
	}
	return nil
}

// imageLinks returns the ownerships by owned id.
func (s *state) imageLinks() []imagefmt.Link {
	if s.own.len() == 0 {
		return nil
	}
	out := make([]imagefmt.Link, 0, s.own.len())
	s.own.each(func(slot uint32, l ownLink) {
		il := imagefmt.Link{Owned: s.At(slot).ID, Owner: l.ownerID}
		if l.orphan {
			il.Orphan = 1
		}
		out = append(out, il)
	})
	slices.SortFunc(out, func(a, b imagefmt.Link) int { return cmp.Compare(a.Owned, b.Owned) })
	return out
}

// linkOwned adds the image's ownerships to the loaded state: every owned
// node and its owner must exist, and no node owns itself.
func (ld *loader) linkOwned() error {
	s := ld.s
	for _, l := range ld.dec.Links {
		slot, ok := s.SlotOf(l.Owned)
		if !ok {
			return ld.dec.Corrupt("ownership of node %d, which does not exist", l.Owned)
		}
		os, ok := s.SlotOf(l.Owner)
		if !ok || l.Owner == l.Owned || l.Owner == layout.RootID {
			return ld.dec.Corrupt("node %d is owned by node %d, which does not exist or cannot own it", l.Owned, l.Owner)
		}
		s.own.add(slot, ownLink{owner: os, ownerID: l.Owner, orphan: l.Orphan == 1})
	}
	return nil
}
