package catalog

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
)

// Owned nodes.
//
// A create can name an owner (Op.Owner): another node, and the version of
// it that owns the new node, which is the owner's Modified index. The
// create is refused (ErrConflict) unless the owner exists and was last
// changed at exactly that index when the batch applies. Any later change
// of the owner (an update or a move, both of which set its Modified) or
// its deletion ends that version, and the operation that ends it is
// followed, within the same operation of the same batch, by the end of
// everything the version owns, on every replica alike: each owned node is
// deleted with its subtree or, if its create asked for it (Owner.Orphan),
// kept and marked with the attributes OrphanedAttr (the index that ended
// the version) and OrphanReasonAttr. The owned nodes go in decreasing id
// order, as ordinary deletes and updates: watchers see ordinary events at
// the owner's index, the digest and the usage follow, and a batch that
// fails later rolls the whole of it back. A marked node is no longer owned;
// marking it is a change, so what it owns in turn ends too.
//
// The heartbeat's member records are such owners: they change only
// through transitions (restart, death, return), each a proposal that bumps
// the record's generation, or through their removal; a leader change
// writes the monitor claim, not the records. So a node owned by a
// member's record at its current index lives exactly as long as the
// member's epoch, with no clock and no renewal.
//
// Fencing needs nothing more: an OpCheck on the owner with Cond.Modified
// set to the version makes a batch apply only while that version is
// current, and a create that names an owner is fenced by it implicitly.
//
// The owner index maps an owner's id to the slots it owns and each owned
// slot back to its owner, so ending a version costs time in proportion to
// what it owns, not to the catalog.

// Owner ties the node a create makes to a version of another node; see
// Op.Owner.
type Owner struct {
	Path    string // the owner node: not the root, not the node created
	Version uint64 // the owner's Modified index the node is tied to (not 0)
	// Orphan keeps the node when the version ends, marked with
	// OrphanedAttr and OrphanReasonAttr, instead of deleting it with its
	// subtree.
	Orphan bool
}

func (o Owner) zero() bool { return o == Owner{} }

// The attributes that mark a node orphaned when its owner's version ended.
const (
	// OrphanedAttr is the log index (Int) of the batch that ended the
	// version.
	OrphanedAttr = "orphaned"
	// OrphanReasonAttr (String) says how: OrphanOwnerChanged or
	// OrphanOwnerDeleted.
	OrphanReasonAttr = "orphan_reason"

	OrphanOwnerChanged = "owner changed"
	OrphanOwnerDeleted = "owner deleted"
)

// ownLink is an owned node's tie to its owner.
type ownLink struct {
	owner  uint64 // the owner's id (ids are never reused)
	orphan bool
}

// ownership is the owner index. Every link's owner exists and is at the
// version the link was made at: whatever ends it removes the link in the
// same operation.
type ownership struct {
	of map[uint32]ownLink             // owned slot -> its owner
	by map[uint64]map[uint32]struct{} // owner id -> owned slots
}

func (w *ownership) add(slot uint32, l ownLink) {
	if w.of == nil {
		w.of = map[uint32]ownLink{}
		w.by = map[uint64]map[uint32]struct{}{}
	}
	w.of[slot] = l
	set := w.by[l.owner]
	if set == nil {
		set = map[uint32]struct{}{}
		w.by[l.owner] = set
	}
	set[slot] = struct{}{}
}

func (w *ownership) remove(slot uint32) (ownLink, bool) {
	l, ok := w.of[slot]
	if !ok {
		return ownLink{}, false
	}
	delete(w.of, slot)
	set := w.by[l.owner]
	delete(set, slot)
	if len(set) == 0 {
		delete(w.by, l.owner)
	}
	return l, true
}

// ownerEnd is an owner whose version an operation ended.
type ownerEnd struct {
	id      uint64
	deleted bool
}

// linkHash is the digest element of an ownership: 'O' owned:u64be
// owner:u64be orphan:byte, by node ids, which every replica assigns alike
// and images carry.
func linkHash(owned uint64, l ownLink) [sha256.Size]byte {
	var b [18]byte
	b[0] = 'O'
	binary.BigEndian.PutUint64(b[1:], owned)
	binary.BigEndian.PutUint64(b[9:], l.owner)
	if l.orphan {
		b[17] = 1
	}
	return sha256.Sum256(b[:])
}

// digestLink adds (or subtracts) the element hash of slot's ownership.
func (g *digester) link(s *state, slot uint32, l ownLink, add bool) {
	if g.off {
		return
	}
	e := linkElem(s.digestFormat, s.at(slot).id, l)
	if add {
		s.digest.plus(e)
	} else {
		s.digest.minus(e)
	}
}

// checkOwner resolves a create's owner and checks that its version is
// current; it returns the owner's id.
func (t *Tree) checkOwner(s *state, o *Owner) (uint64, error) {
	slot, ok := t.resolveW(s, o.Path, false)
	if !ok {
		return 0, conflict("owner %q does not exist", o.Path)
	}
	r := s.at(slot)
	if r.modified != o.Version {
		return 0, conflict("owner %q is at version %d, not %d (a version ends when the owner changes)", o.Path, r.modified, o.Version)
	}
	return r.id, nil
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
	l, ok := s.own.remove(slot)
	if !ok {
		return
	}
	t.dg.link(s, slot, l, false)
	t.undo = append(t.undo, undoRec{op: uUnlink, slot: slot, aux: int32(len(t.undoLinks))})
	t.undoLinks = append(t.undoLinks, l)
}

// changing notes that the node at slot changes or goes: if it owns
// anything, the version that owns it ends.
func (t *Tree) changing(s *state, slot uint32, deleted bool) {
	if len(s.own.by) == 0 {
		return
	}
	if id := s.at(slot).id; s.own.by[id] != nil {
		t.ended = append(t.ended, ownerEnd{id: id, deleted: deleted})
	}
}

// endOwned ends what the versions noted in t.ended owned: called after
// each operation, it deletes or marks the owned nodes, in decreasing id
// order per owner; marks end further versions, which it ends in turn.
func (t *Tree) endOwned(s *state, index uint64) {
	for i := 0; i < len(t.ended); i++ {
		e := t.ended[i]
		set := s.own.by[e.id]
		if len(set) == 0 {
			continue
		}
		slots := make([]uint32, 0, len(set))
		for slot := range set {
			slots = append(slots, slot)
		}
		// Newest first: siblings created in name order then leave their
		// parent's child list from its end, which moves nothing.
		slices.SortFunc(slots, func(a, b uint32) int { return cmp.Compare(s.at(b).id, s.at(a).id) })
		reason := OrphanOwnerChanged
		if e.deleted {
			reason = OrphanOwnerDeleted
		}
		for _, slot := range slots {
			l, ok := s.own.of[slot]
			if !ok || l.owner != e.id {
				continue // gone with an earlier owned node's subtree
			}
			path := s.pathOf(slot)
			t.pc.reset()
			if l.orphan {
				t.unlink(s, slot)
				mark := rawOp{typ: OpUpdate, path: path, set: []kv{
					{OrphanReasonAttr, String(reason)},
					{OrphanedAttr, Int(int64(index))},
				}}
				if t.update(s, index, slot, &mark) == nil {
					continue
				}
				// The marks do not fit the node's size limit: it goes.
			}
			t.dg.subtree(s, slot, path, false)
			t.deleteTree(s, slot, path)
		}
	}
	t.ended = t.ended[:0]
}

// Owned returns the owner of the node at path and the version that owns
// it; ok is false if the node does not exist or is not owned.
func (t *Tree) Owned(path string) (owner Owner, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := t.s
	slot, found := s.resolve(path)
	if !found {
		return Owner{}, false
	}
	l, owned := s.own.of[slot]
	if !owned {
		return Owner{}, false
	}
	os, live := s.slotOf(l.owner)
	if !live {
		return Owner{}, false // not reached: an owner outlives its links
	}
	return Owner{Path: s.pathOf(os), Version: s.at(os).modified, Orphan: l.orphan}, true
}

// OwnedCount returns how many nodes are owned.
func (t *Tree) OwnedCount() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.s.own.of)
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
	if w.Version == 0 {
		return fmt.Errorf("%w: owner %q without a version", ErrInvalid, w.Path)
	}
	return nil
}

// imageLink is an ownership as images carry it.
type imageLink struct {
	owned, owner uint64
	orphan       byte
}

// imageLinks returns the ownerships by owned id.
func (s *state) imageLinks() []imageLink {
	if len(s.own.of) == 0 {
		return nil
	}
	out := make([]imageLink, 0, len(s.own.of))
	for slot, l := range s.own.of {
		il := imageLink{owned: s.at(slot).id, owner: l.owner}
		if l.orphan {
			il.orphan = 1
		}
		out = append(out, il)
	}
	slices.SortFunc(out, func(a, b imageLink) int { return cmp.Compare(a.owned, b.owned) })
	return out
}

// links decodes an 'O' block of an image into pending links; linkOwned
// checks and adds them once every node is in.
func (ld *loader) links(p []byte) error {
	d := &decoder{data: p}
	for d.off < len(p) && d.err == nil {
		delta := d.uvarint("owned id delta")
		owner := d.uvarint("owner id")
		orphan := d.byte("orphan flag")
		if d.err != nil {
			break
		}
		if delta == 0 || orphan > 1 {
			return ld.br.corrupt("ownership %d: owned id not increasing or orphan flag %d", len(ld.owned), orphan)
		}
		ld.prevOwned += delta
		ld.owned = append(ld.owned, imageLink{owned: ld.prevOwned, owner: owner, orphan: orphan})
	}
	if d.err != nil {
		return ld.br.corrupt("ownerships: %s", detail(d.err))
	}
	return nil
}

// linkOwned adds the image's ownerships to the loaded state: every owned
// node and its owner must exist, and no node owns itself.
func (ld *loader) linkOwned() error {
	s := ld.s
	for _, l := range ld.owned {
		slot, ok := s.slotOf(l.owned)
		if !ok {
			return ld.br.corrupt("ownership of node %d, which does not exist", l.owned)
		}
		if _, ok := s.slotOf(l.owner); !ok || l.owner == l.owned || l.owner == rootID {
			return ld.br.corrupt("node %d is owned by node %d, which does not exist or cannot own it", l.owned, l.owner)
		}
		s.own.add(slot, ownLink{owner: l.owner, orphan: l.orphan == 1})
	}
	return nil
}
