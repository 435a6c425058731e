package layout

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Slots of the slab and the root's place.
const (
	SlabBits = 12            // log2 of the recs in one slab chunk
	SlabSize = 1 << SlabBits // recs in one slab chunk

	RootSlot = 0 // the root's slot, in every store
	RootID   = 1 // the root's id, in every tree
)

// Rec is one node. 48 bytes.
type Rec struct {
	ID       uint64 // 0: the slot is free
	Blob     uint64 // arena ref of: name, attributes
	Created  uint64
	Modified uint64
	Parent   uint32 // slot
	Kids     uint32 // handle of the child list in Store.Kids; 0: none
	Kind     uint32 // the kind, numbered by the store's owner
	BLen     uint32 // length of the blob
}

// Arena is an append-only store of blobs in 1 MiB chunks (larger blobs get
// their own chunk). A ref is chunk<<32 | offset; the Rec keeps the length.
// Chunks are never written below their length, so a reader holding the lock
// may read any blob a Rec refers to.
type Arena struct {
	Chunks  [][]byte
	Live    int64 // bytes referenced by recs (including prefixes)
	Garbage int64 // bytes no longer referenced
}

const arenaChunk = 1 << 20

// Put adds a copy of b and returns its ref and length.
func (a *Arena) Put(b []byte) (uint64, uint32) {
	ref, dst := a.Alloc(len(b))
	copy(dst, b)
	return ref, uint32(len(b))
}

// Alloc adds a blob of need bytes and returns its ref and the bytes to
// fill in (which the caller must do before anyone reads the blob).
func (a *Arena) Alloc(need int) (uint64, []byte) {
	n := len(a.Chunks)
	if n == 0 || cap(a.Chunks[n-1])-len(a.Chunks[n-1]) < need {
		c := arenaChunk
		if need > c {
			c = need
		}
		a.Chunks = append(a.Chunks, make([]byte, 0, c))
		n++
	}
	c := a.Chunks[n-1]
	off := len(c)
	c = c[:off+need]
	a.Chunks[n-1] = c
	a.Live += int64(need)
	return uint64(n-1)<<32 | uint64(off), c[off : off+need : off+need]
}

// Get returns the blob of n bytes at ref.
func (a *Arena) Get(ref uint64, n uint32) []byte {
	off := uint32(ref)
	return a.Chunks[ref>>32][off : off+n : off+n]
}

// Drop and Undrop account a blob as garbage (or live again).
func (a *Arena) Drop(n uint32) {
	a.Live -= int64(n)
	a.Garbage += int64(n)
}

func (a *Arena) Undrop(n uint32) {
	a.Live += int64(n)
	a.Garbage -= int64(n)
}

// At returns the Rec at slot.
func (s *Store) At(slot uint32) *Rec { return &s.Slab[slot>>SlabBits][slot&(SlabSize-1)] }

// AllocSlot returns a free slot, preferring reuse.
func (s *Store) AllocSlot() uint32 {
	if n := len(s.Free); n > 0 {
		slot := s.Free[n-1]
		s.Free = s.Free[:n-1]
		return slot
	}
	slot := s.NSlots
	if int(slot>>SlabBits) == len(s.Slab) {
		s.Slab = append(s.Slab, new([SlabSize]Rec))
	}
	s.NSlots++
	return slot
}

// Blob returns the name and attribute bytes of a Rec.
func (s *Store) Blob(r *Rec) []byte {
	return s.Arena.Get(r.Blob, r.BLen)
}

// SplitBlob returns the name and the encoded attributes (count first).
func SplitBlob(b []byte) (name, attrs []byte) {
	if l := int(b[0]); l < 0x80 {
		return b[1 : 1+l], b[1+l:]
	}
	l, n := binary.Uvarint(b)
	return b[n : n+int(l)], b[n+int(l):]
}

// Name returns the name of the node at slot.
func (s *Store) Name(slot uint32) []byte {
	name, _ := SplitBlob(s.Blob(s.At(slot)))
	return name
}

// KidsOf returns the children of slot, sorted by name.
func (s *Store) KidsOf(slot uint32) []uint32 {
	return s.Kids.List(s.At(slot).Kids)
}

// KidPos finds name among the children of parent.
func (s *Store) KidPos(parent uint32, name []byte) (int, bool) {
	kids := s.KidsOf(parent)
	// Names often arrive in increasing order (ids, dates, counters): one
	// comparison with the last child settles an append.
	if n := len(kids); n > 0 && bytes.Compare(s.Name(kids[n-1]), name) < 0 {
		return n, false
	}
	return s.searchKids(kids, name)
}

// searchKids finds name among kids, sorted by name: where it is or would
// go, and whether it is there.
func (s *Store) searchKids(kids []uint32, name []byte) (int, bool) {
	lo, hi := 0, len(kids)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bytes.Compare(s.Name(kids[m]), name) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(kids) && bytes.Equal(s.Name(kids[lo]), name)
}

// Child returns the child of parent named name, for the applier (see
// KidPos).
func (s *Store) Child(parent uint32, name []byte) (uint32, bool) {
	pos, ok := s.KidPos(parent, name)
	if !ok {
		return 0, false
	}
	return s.KidsOf(parent)[pos], true
}

// LookupKid finds the child named name, for readers: a plain binary search,
// since the applier's append check in KidPos costs readers one more
// comparison (two cache misses on a cold list) per level. (A lookup by
// path goes through the path index instead.)
func (s *Store) LookupKid(parent uint32, name []byte) (uint32, bool) {
	kids := s.KidsOf(parent)
	if pos, ok := s.searchKids(kids, name); ok {
		return kids[pos], true
	}
	return 0, false
}

// RoomForKid makes room in parent's child list for one more child, so
// that the InsertKid that follows cannot fail: an operation calls it before
// it changes anything, and fails with ErrCapacity when there is none.
func (s *Store) RoomForKid(parent uint32) error {
	pr := s.At(parent)
	h, err := s.Kids.room(pr.Kids, KidForward)
	pr.Kids = h
	return err
}

// InsertKid links slot under parent (its Rec says so already, name
// included), in the child list and the path index; the caller checked the
// name is free and, in a batch, made room (RoomForKid). Undoing a batch
// relinks what it unlinked, within the chunks kept in reserve for it.
func (s *Store) InsertKid(parent, slot uint32) {
	name := s.Name(slot)
	pos, _ := s.KidPos(parent, name)
	s.LinkKidAt(parent, pos, slot, s.Paths.childKey(s, parent, name))
}

// LinkKidAt is InsertKid with the position in the child list and the path
// index key known.
func (s *Store) LinkKidAt(parent uint32, pos int, slot uint32, key uint64) {
	pr := s.At(parent)
	h, err := s.Kids.Insert(pr.Kids, pos, slot, KidRollback)
	if err != nil {
		panic(fmt.Sprintf("catalog: linking a child: %v", err)) // internal invariant: room or the reserve
	}
	pr.Kids = h
	s.Paths.Add(key, slot)
}

// RemoveKid unlinks slot from parent (before its Rec changes), freeing an
// emptied child list.
func (s *Store) RemoveKid(parent, slot uint32) {
	name := s.Name(slot)
	// The last child needs no search: subtrees are deleted from the end of
	// each list, and owned nodes newest first.
	kids := s.KidsOf(parent)
	pos := len(kids) - 1
	if pos < 0 || kids[pos] != slot {
		var ok bool
		if pos, ok = s.KidPos(parent, name); !ok {
			panic("catalog: removeKid of a node not linked") // internal invariant
		}
	}
	pr := s.At(parent)
	pr.Kids = s.Kids.Remove(pr.Kids, pos)
	s.Paths.remove(s.Paths.childKey(s, parent, name), slot)
}

// Resolve returns the slot at path; ok is false if there is none or path
// is not valid (ValidPath), which resolve checks as it goes.
func (s *Store) Resolve(path string) (uint32, bool) {
	return s.Paths.resolve(s, path)
}

// PathOf builds the path of slot from its ancestors' names.
func (s *Store) PathOf(slot uint32) string {
	if slot == RootSlot {
		return "/"
	}
	var stack [32]uint32
	anc := stack[:0]
	n := 0
	for c := slot; c != RootSlot; c = s.At(c).Parent {
		anc = append(anc, c)
		n += 1 + len(s.Name(c))
	}
	b := make([]byte, 0, n)
	for i := len(anc) - 1; i >= 0; i-- {
		b = append(b, '/')
		b = append(b, s.Name(anc[i])...)
	}
	return string(b)
}

// Store is the layout of one tree's nodes: the slab of recs, the Arena of
// their blobs, the id table, the child lists and the path index.
type Store struct {
	Slab   []*[SlabSize]Rec
	NSlots uint32
	Free   []uint32

	ids idTable // id -> slot (idtable.go)

	Arena Arena

	Kids KidPool
	// paths finds a child by name (pathindex.go): the lists find it by
	// binary search, for the applier, which needs the position too.
	Paths PathIndex
}

// NewStore returns a store with no nodes.
func NewStore() Store {
	return Store{Paths: newPathIndex()}
}
