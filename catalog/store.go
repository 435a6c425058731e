package catalog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/metatree/metatree/catalog/internal/idset"
)

// The compact layout. A node is a fixed-size, pointer-free rec (48 bytes)
// in a chunked slab, addressed by a dense slot number that is private to
// this process (slots are reused and differ between replicas; nothing
// observable depends on them: results are ordered by id or name). Its name
// and attributes live in one blob in an append-only byte arena (compacted
// when mostly garbage); kinds and attribute keys are interned, values are
// varint-packed. Children are sorted lists of slots in a pooled array
// (kids.go); a path maps to its slot through a hash table of whole-path
// hashes (pathindex.go), a local index like the slots; ids map to slots
// through pages of a direct table (ids are dense, from a counter) under a
// radix whose levels exist only over ids in use (idtable.go); kind sets
// and index postings are chunked sorted slot sets (internal/idset). The GC sees a few thousand large pointer-free
// arrays instead of millions of small objects. BenchmarkDorisScale reports
// the bytes a node this costs, and BenchmarkNaiveTreeMemory compares it with
// a tree of maps and pointers.
//
// Limits of the layout: a sorted child list is moved on insert, so a node
// with millions of children inserted in random name order is slow to build
// (appends in name order are fast); a move re-keys the moved node's
// descendants in the path index (their paths change), so it costs in
// proportion to the subtree; slots are uint32 (4 billion live nodes); ids
// are below 2^40 (a tree hands out about a trillion, and a create past
// that fails with ErrCapacity); one node's name and attributes are at most
// about 4 MiB; child lists live in at most 4,096 chunks (kids.go), of 1 Mi
// slots each or one list too big for the size classes, and a batch that
// would need more fails with ErrCapacity. The pool's layout depends on the
// history of allocations, so a replica near that limit may refuse a batch
// another accepts: it is far beyond the memory a catalog is sized for.

const (
	slabBits = 12
	slabSize = 1 << slabBits

	rootSlot = 0
	rootID   = 1
)

// rec is one node. 48 bytes.
type rec struct {
	id       uint64 // 0: the slot is free
	blob     uint64 // arena ref of: name, attributes
	created  uint64
	modified uint64
	parent   uint32 // slot
	kids     uint32 // handle of the child list in state.kids; 0: none
	kind     uint32 // index into state.kinds
	blen     uint32 // length of the blob
}

// arena is an append-only store of blobs in 1 MiB chunks (larger blobs get
// their own chunk). A ref is chunk<<32 | offset; the rec keeps the length.
// Chunks are never written below their length, so a reader holding the lock
// may read any blob a rec refers to.
type arena struct {
	chunks  [][]byte
	live    int64 // bytes referenced by recs (including prefixes)
	garbage int64 // bytes no longer referenced
}

const arenaChunk = 1 << 20

func (a *arena) put(b []byte) (uint64, uint32) {
	ref, dst := a.alloc(len(b))
	copy(dst, b)
	return ref, uint32(len(b))
}

// alloc adds a blob of need bytes and returns its ref and the bytes to
// fill in (which the caller must do before anyone reads the blob).
func (a *arena) alloc(need int) (uint64, []byte) {
	n := len(a.chunks)
	if n == 0 || cap(a.chunks[n-1])-len(a.chunks[n-1]) < need {
		c := arenaChunk
		if need > c {
			c = need
		}
		a.chunks = append(a.chunks, make([]byte, 0, c))
		n++
	}
	c := a.chunks[n-1]
	off := len(c)
	c = c[:off+need]
	a.chunks[n-1] = c
	a.live += int64(need)
	return uint64(n-1)<<32 | uint64(off), c[off : off+need : off+need]
}

// get returns the blob of n bytes at ref.
func (a *arena) get(ref uint64, n uint32) []byte {
	off := uint32(ref)
	return a.chunks[ref>>32][off : off+n : off+n]
}

// drop and undrop account a blob as garbage (or live again).
func (a *arena) drop(n uint32) {
	a.live -= int64(n)
	a.garbage += int64(n)
}

func (a *arena) undrop(n uint32) {
	a.live += int64(n)
	a.garbage -= int64(n)
}

// secIndex is a replicated secondary index on (kind, attribute): attribute
// value (its encoded bytes) to the slots of the nodes of that kind holding
// it.
type secIndex struct {
	kind, key         uint32
	kindName, keyName string
	post              map[string]*idset.Set
}

func (x *secIndex) add(val []byte, id uint32) {
	p := x.post[string(val)]
	if p == nil {
		p = new(idset.Set)
		x.post[string(val)] = p
	}
	p.Add(id)
}

func (x *secIndex) remove(val []byte, id uint32) {
	p := x.post[string(val)]
	if p == nil {
		return
	}
	p.Remove(id)
	if p.Len() == 0 {
		delete(x.post, string(val))
	}
}

// state is the whole content of a tree. Load builds a new one and swaps it
// in; everything else mutates the current one under Tree.mu.
type state struct {
	index  uint64 // last applied log index
	nextID uint64
	digest sum256 // of the content, in digestFormat (digest.go)
	// digestFormat is the format digest is kept in.
	digestFormat DigestFormat

	slab   []*[slabSize]rec
	nslots uint32
	free   []uint32

	ids idTable // id -> slot (idtable.go)

	arena arena
	// size is the sum of the live nodes' sizes as replicated decisions
	// count them (nodeSize): Usage.Bytes reads it.
	size int64

	kids kidPool
	// paths finds a child by name (pathindex.go): the lists find it by
	// binary search, for the applier, which needs the position too.
	paths pathIndex

	kinds    []string // [0] is "", the root's kind
	kindIdx  map[string]uint32
	kindSets []*idset.Set // by kind: slots of its nodes; the root is in none

	keys   []string
	keyIdx map[string]uint32

	// Recently interned kind and keys (a cache in front of the maps).
	kindHot    uint32
	keyHot     [8]uint32
	keyHotNext uint32
	keyAt      [8]uint32 // by position in an op's set

	indexes     map[[2]uint32]*secIndex
	kindIndexes map[uint32][]*secIndex

	own ownership // the owner index (owner.go)

	lr longReads
}

// emptyState returns a state with no nodes (not even the root) at index,
// whose next id is nextID: the start of a new tree and of a loaded one.
func emptyState(index, nextID uint64) *state {
	s := &state{
		index:       index,
		nextID:      nextID,
		kinds:       []string{""},
		kindIdx:     map[string]uint32{"": 0},
		kindSets:    []*idset.Set{nil},
		keyIdx:      map[string]uint32{},
		indexes:     map[[2]uint32]*secIndex{},
		kindIndexes: map[uint32][]*secIndex{},
		paths:       newPathIndex(),
	}
	s.lr.init()
	return s
}

func newState() *state {
	s := emptyState(0, rootID+1)
	var b []byte
	b = binary.AppendUvarint(b, 0) // empty name
	b = binary.AppendUvarint(b, 0) // no attributes
	slot := s.allocSlot()
	ref, n := s.arena.put(b)
	*s.at(slot) = rec{id: rootID, blob: ref, blen: n}
	s.setSlotOf(rootID, slot)
	s.size = int64(len(b)) // no attributes: the blob is the canonical form
	return s
}

func (s *state) at(slot uint32) *rec { return &s.slab[slot>>slabBits][slot&(slabSize-1)] }

// allocSlot returns a free slot, preferring reuse.
func (s *state) allocSlot() uint32 {
	if n := len(s.free); n > 0 {
		slot := s.free[n-1]
		s.free = s.free[:n-1]
		return slot
	}
	slot := s.nslots
	if int(slot>>slabBits) == len(s.slab) {
		s.slab = append(s.slab, new([slabSize]rec))
	}
	s.nslots++
	return slot
}

// blob returns the name and attribute bytes of a rec.
func (s *state) blob(r *rec) []byte {
	return s.arena.get(r.blob, r.blen)
}

// splitBlob returns the name and the encoded attributes (count first).
func splitBlob(b []byte) (name, attrs []byte) {
	if l := int(b[0]); l < 0x80 {
		return b[1 : 1+l], b[1+l:]
	}
	l, n := binary.Uvarint(b)
	return b[n : n+int(l)], b[n+int(l):]
}

func (s *state) name(slot uint32) []byte {
	name, _ := splitBlob(s.blob(s.at(slot)))
	return name
}

// attrIter walks the encoded attributes of a blob: uvarint count, then per
// attribute the key index (uvarint) and the value (type byte, payload), in
// increasing key-name order.
type attrIter struct {
	b []byte
	n int
}

func newAttrIter(attrs []byte) attrIter {
	c, n := binary.Uvarint(attrs)
	return attrIter{b: attrs[n:], n: int(c)}
}

// next returns the key index and the encoded value (type byte + payload).
func (it *attrIter) next() (key uint32, val []byte, ok bool) {
	if it.n == 0 {
		return 0, nil, false
	}
	it.n--
	k, n := binary.Uvarint(it.b)
	rest := it.b[n:]
	vl := valueLen(rest)
	val = rest[:vl]
	it.b = rest[vl:]
	return uint32(k), val, true
}

// valueLen returns the length of the encoded value at the start of b.
// Blobs are written by this package, so b is well formed.
func valueLen(b []byte) int {
	switch ValueType(b[0]) {
	case TypeString, TypeBytes:
		l, n := binary.Uvarint(b[1:])
		return 1 + n + int(l)
	case TypeInt:
		_, n := binary.Varint(b[1:])
		return 1 + n
	case TypeBool:
		return 2
	}
	panic("catalog: corrupt attribute blob") // an internal invariant, not input
}

// decodeValue turns encoded value bytes into a Value (copying).
func decodeValue(b []byte) Value {
	t := ValueType(b[0])
	switch t {
	case TypeString, TypeBytes:
		l, n := binary.Uvarint(b[1:])
		return Value{typ: t, s: string(b[1+n : 1+n+int(l)])}
	case TypeInt:
		i, _ := binary.Varint(b[1:])
		return Value{typ: t, i: i}
	case TypeBool:
		return Value{typ: t, i: int64(b[1])}
	}
	return Value{}
}

// attrValue returns the encoded value of key in a blob's attributes.
func attrValue(attrs []byte, key uint32) ([]byte, bool) {
	it := newAttrIter(attrs)
	for {
		k, v, ok := it.next()
		if !ok {
			return nil, false
		}
		if k == key {
			return v, true
		}
	}
}

// kidsOf returns the children of slot, sorted by name.
func (s *state) kidsOf(slot uint32) []uint32 {
	return s.kids.list(s.at(slot).kids)
}

// kidPos finds name among the children of parent.
func (s *state) kidPos(parent uint32, name []byte) (int, bool) {
	kids := s.kidsOf(parent)
	lo, hi := 0, len(kids)
	// Names often arrive in increasing order (ids, dates, counters): one
	// comparison with the last child settles an append.
	if hi > 0 && bytes.Compare(s.name(kids[hi-1]), name) < 0 {
		return hi, false
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bytes.Compare(s.name(kids[m]), name) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(kids) && bytes.Equal(s.name(kids[lo]), name)
}

func (s *state) child(parent uint32, name []byte) (uint32, bool) {
	pos, ok := s.kidPos(parent, name)
	if !ok {
		return 0, false
	}
	return s.kidsOf(parent)[pos], true
}

// lookupKid finds the child named name, for readers: a plain binary search,
// since the applier's append check in kidPos costs readers one more
// comparison (two cache misses on a cold list) per level. (A lookup by
// path goes through the path index instead.)
func (s *state) lookupKid(parent uint32, name []byte) (uint32, bool) {
	kids := s.kidsOf(parent)
	lo, hi := 0, len(kids)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bytes.Compare(s.name(kids[m]), name) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(kids) && bytes.Equal(s.name(kids[lo]), name) {
		return kids[lo], true
	}
	return 0, false
}

// roomForKid makes room in parent's child list for one more child, so
// that the insertKid that follows cannot fail: an operation calls it before
// it changes anything, and fails with ErrCapacity when there is none.
func (s *state) roomForKid(parent uint32) error {
	pr := s.at(parent)
	h, err := s.kids.room(pr.kids, kidForward)
	pr.kids = h
	return err
}

// insertKid links slot under parent (its rec says so already, name
// included), in the child list and the path index; the caller checked the
// name is free and, in a batch, made room (roomForKid). Undoing a batch
// relinks what it unlinked, within the chunks kept in reserve for it.
func (s *state) insertKid(parent, slot uint32) {
	name := s.name(slot)
	pos, _ := s.kidPos(parent, name)
	s.linkKidAt(parent, pos, slot, s.paths.childKey(s, parent, name))
}

// linkKidAt is insertKid with the position in the child list and the path
// index key known.
func (s *state) linkKidAt(parent uint32, pos int, slot uint32, key uint64) {
	pr := s.at(parent)
	h, err := s.kids.insert(pr.kids, pos, slot, kidRollback)
	if err != nil {
		panic(fmt.Sprintf("catalog: linking a child: %v", err)) // internal invariant: room or the reserve
	}
	pr.kids = h
	s.paths.add(key, slot)
}

// removeKid unlinks slot from parent (before its rec changes), freeing an
// emptied child list.
func (s *state) removeKid(parent, slot uint32) {
	name := s.name(slot)
	// The last child needs no search: subtrees are deleted from the end of
	// each list, and owned nodes newest first.
	kids := s.kidsOf(parent)
	pos := len(kids) - 1
	if pos < 0 || kids[pos] != slot {
		var ok bool
		if pos, ok = s.kidPos(parent, name); !ok {
			panic("catalog: removeKid of a node not linked") // internal invariant
		}
	}
	pr := s.at(parent)
	pr.kids = s.kids.remove(pr.kids, pos)
	s.paths.remove(s.paths.childKey(s, parent, name), slot)
}

func (s *state) internKind(k string) uint32 {
	if i := s.kindHot; int(i) < len(s.kinds) && s.kinds[i] == k {
		return i
	}
	if i, ok := s.kindIdx[k]; ok {
		s.kindHot = i
		return i
	}
	i := uint32(len(s.kinds))
	k = strings.Clone(k) // k may view entry bytes
	s.kinds = append(s.kinds, k)
	s.kindIdx[k] = i
	s.kindSets = append(s.kindSets, new(idset.Set))
	return i
}

// internKeyAt interns the key at position j of an op's sorted set: ops of a
// batch tend to set the same keys in the same order, so the key used at that
// position last time is tried first.
func (s *state) internKeyAt(j int, k string) uint32 {
	if j < len(s.keyAt) {
		if i := s.keyAt[j]; int(i) < len(s.keys) && s.keys[i] == k {
			return i
		}
		i := s.internKey(k)
		s.keyAt[j] = i
		return i
	}
	return s.internKey(k)
}

func (s *state) internKey(k string) uint32 {
	// Batches repeat the same few keys: try the recently used ones before
	// hashing.
	for _, i := range s.keyHot {
		if int(i) < len(s.keys) && s.keys[i] == k {
			return i
		}
	}
	i, ok := s.keyIdx[k]
	if ok {
		s.keyHot[s.keyHotNext%uint32(len(s.keyHot))] = i
		s.keyHotNext++
		return i
	}
	i = uint32(len(s.keys))
	k = strings.Clone(k)
	s.keys = append(s.keys, k)
	s.keyIdx[k] = i
	return i
}

// resolve returns the slot at path; ok is false if there is none or path
// is not valid (ValidPath), which resolve checks as it goes.
func (s *state) resolve(path string) (uint32, bool) {
	return s.paths.resolve(s, path)
}

// pathOf builds the path of slot from its ancestors' names.
func (s *state) pathOf(slot uint32) string {
	if slot == rootSlot {
		return "/"
	}
	var stack [32]uint32
	anc := stack[:0]
	n := 0
	for c := slot; c != rootSlot; c = s.at(c).parent {
		anc = append(anc, c)
		n += 1 + len(s.name(c))
	}
	b := make([]byte, 0, n)
	for i := len(anc) - 1; i >= 0; i-- {
		b = append(b, '/')
		b = append(b, s.name(anc[i])...)
	}
	return string(b)
}

// node materializes the node at slot.
func (s *state) node(slot uint32) Node {
	r := s.at(slot)
	return s.nodeFrom(r, s.pathOf(slot), s.parentID(r))
}

func (s *state) parentID(r *rec) uint64 {
	if r.id == rootID {
		return 0
	}
	return s.at(r.parent).id
}

func (s *state) nodeFrom(r *rec, path string, parentID uint64) Node {
	n := Node{ID: r.id, Parent: parentID, Path: path, Kind: s.kinds[r.kind], Created: r.created, Modified: r.modified}
	decodeBlob(s.blob(r), s.keys, &n)
	return n
}

// decodeBlob sets n's Name and Attrs from a blob, naming attribute keys
// from keys.
func decodeBlob(blob []byte, keys []string, n *Node) {
	name, attrs := splitBlob(blob)
	n.Name = string(name)
	it := newAttrIter(attrs)
	if it.n > 0 {
		n.Attrs = make(map[string]Value, it.n)
		for {
			k, v, ok := it.next()
			if !ok {
				break
			}
			n.Attrs[keys[k]] = decodeValue(v)
		}
	}
}

// A node's size, as every replicated decision counts it (the bound on a
// node, maxBlobBytes, and Usage.Bytes), is the length of its name and
// attributes in a canonical encoding: its blob with each attribute key
// written as the key's name (uvarint length, then the bytes) instead of the
// tree's number for it. Key numbers are local: a tree numbers keys in the
// order it first meets them (a batch rolled back included) and a loaded
// tree in the image's order, and a number of 128 or more takes two bytes;
// the names are the same on every replica.

// keyCost is what a key (or a name) adds to a node's size.
func keyCost(k string) int { return uvarintLen(uint64(len(k))) + len(k) }

// nodeSize returns the size of the node whose blob is b (see keyCost).
func (s *state) nodeSize(b []byte) int {
	_, attrs := splitBlob(b)
	n := len(b)
	it := newAttrIter(attrs)
	for {
		k, _, ok := it.next()
		if !ok {
			return n
		}
		n += keyCost(s.keys[k]) - uvarintLen(uint64(k))
	}
}

// uvarintLen is the length of x as a uvarint.
func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
