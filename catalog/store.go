package catalog

import (
	"encoding/binary"
	"strings"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/idset"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// A tree's state: its nodes in the compact layout (internal/layout: slab,
// arena, id table, child lists, path index) and, on top, what the catalog
// adds: the interned kinds and attribute keys, the kind sets and secondary
// indexes, the owner index, the digest and the node sizes the quota counts.

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

	// The nodes' layout: slab, arena, id table, child lists, path index.
	layout.Store

	// size is the sum of the live nodes' sizes as replicated decisions
	// count them (nodeSize): Usage.Bytes reads it.
	size int64

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
		Store:       layout.NewStore(),
	}
	s.lr.init()
	return s
}

func newState() *state {
	s := emptyState(0, layout.RootID+1)
	var b []byte
	b = binary.AppendUvarint(b, 0) // empty name
	b = binary.AppendUvarint(b, 0) // no attributes
	slot := s.AllocSlot()
	ref, n := s.Arena.Put(b)
	*s.At(slot) = layout.Rec{ID: layout.RootID, Blob: ref, BLen: n}
	s.SetSlotOf(layout.RootID, slot)
	s.size = int64(len(b)) // no attributes: the blob is the canonical form
	return s
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

// node materializes the node at slot.
func (s *state) node(slot uint32) Node {
	r := s.At(slot)
	return s.nodeFrom(r, s.PathOf(slot), s.parentID(r))
}

func (s *state) parentID(r *layout.Rec) uint64 {
	if r.ID == layout.RootID {
		return 0
	}
	return s.At(r.Parent).ID
}

func (s *state) nodeFrom(r *layout.Rec, path string, parentID uint64) Node {
	n := Node{ID: r.ID, Parent: parentID, Path: path, Kind: s.kinds[r.Kind], Created: r.Created, Modified: r.Modified}
	decodeBlob(s.Blob(r), s.keys, &n)
	return n
}

// decodeBlob sets n's Name and Attrs from a blob, naming attribute keys
// from keys.
func decodeBlob(blob []byte, keys []string, n *Node) {
	name, attrs := layout.SplitBlob(blob)
	n.Name = string(name)
	it := codec.NewAttrIter(attrs)
	if it.Len() > 0 {
		n.Attrs = make(map[string]Value, it.Len())
		for {
			k, v, ok := it.Next()
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
func keyCost(k string) int { return codec.StrLen(k) }

// nodeSize returns the size of the node whose blob is b (see keyCost).
func (s *state) nodeSize(b []byte) int {
	_, attrs := layout.SplitBlob(b)
	n := len(b)
	it := codec.NewAttrIter(attrs)
	for {
		k, _, ok := it.Next()
		if !ok {
			return n
		}
		n += keyCost(s.keys[k]) - codec.UvarintLen(uint64(k))
	}
}
