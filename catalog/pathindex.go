package catalog

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
)

// pathIndex finds a node's child by name in a constant number of cache
// misses, so that a Get by path costs about one bucket, one rec and one
// name a level, whatever the catalog's size: the sorted child lists
// (kids.go) would take a binary search, each probe a rec and a name blob.
//
// It is a hash table from (parent slot, name) to the child's slot, open
// addressing over one pointer-free array of 64-byte buckets (one cache
// line each): 12 slots and a one-byte tag of the hash for each, so that a
// probe reads the rec of a candidate only when its tag matches. The hash
// only picks candidates: a candidate is the child when its rec's parent and
// name are the ones asked for, so the answer is exact whatever collides.
// A bucket counts the entries that found it full and settled in a later
// one (its overflow); a lookup stops at the first bucket without any,
// which lets an entry be removed by clearing it, with no tombstones.
//
// The index is local, like the slots it holds: its hash seed is random per
// process and nothing observable depends on its layout. It mirrors the
// child lists: insertKid and removeKid keep it, and so do create (which
// links a child itself) and Load (whose linker links the nodes as they
// arrive). It changes only under the tree's write lock (or inside Load,
// before the state is published), so readers see it whole, at the same
// batch as the rest of the state. A failed batch's rollback relinks and
// unlinks through the same functions, leaving the index holding exactly
// the tree's nodes again (if not in the same buckets).
type pathIndex struct {
	buckets []pathBucket // a power of two of them
	n       int          // entries, pending ones included
	seed    maphash.Seed
	// pending are entries added but not yet in a bucket. An insert is a
	// cache miss in a table the size of the catalog; put one by one
	// between the applier's other work, those misses add up, while
	// flush puts them in a tight loop where they overlap. The table is
	// flushed before anything reads it or removes from it: readers only
	// ever see it flushed (Apply and Load flush before they return).
	pending []pendingEntry
	// touched keeps flush's loads that bring the buckets into the cache:
	// the compiler drops loads whose values go nowhere.
	touched uint32
	// mask is ANDed into every hash; tests narrow it so that names
	// collide.
	mask uint64
}

// pathHashMask is the mask of new indexes (see pathIndex.mask).
var pathHashMask = ^uint64(0)

const (
	bucketSlots = 12
	// The table doubles before its entries fill more than 7/8 of its
	// slots: with 12 slots a bucket, few lookups go past their first.
	pathLoadNum, pathLoadDen = 7, 8
	// noParent marks, in Load, a rec whose parent is not linked yet: the
	// index has no entry for it.
	noParent = ^uint32(0)

	tagLSB = 0x0101010101010101
	tagLow = 0x7f7f7f7f7f7f7f7f
)

// pendingFlush is the number of pending entries that makes add flush.
const pendingFlush = 256

type pendingEntry struct {
	h    uint64
	slot uint32
}

type pathBucket struct {
	tags     [bucketSlots]uint8 // a byte of the entry's hash, never 0; 0: empty
	overflow uint32             // entries that passed this bucket full
	slots    [bucketSlots]uint32
}

func newPathIndex() pathIndex {
	return pathIndex{buckets: make([]pathBucket, 1), seed: maphash.MakeSeed(), mask: pathHashMask}
}

// slotSource reads recs and names: the state, or Load's linker (which
// reads the state's storage through views of its own).
type slotSource interface {
	at(slot uint32) *rec
	name(slot uint32) []byte
}

func (x *pathIndex) hash(parent uint32, name []byte) uint64 {
	h := maphash.Bytes(x.seed, name) ^ uint64(parent)*0x9e3779b97f4a7c15
	h ^= h >> 32
	h *= 0xd6e8feb86659fd93
	h ^= h >> 32
	return h & x.mask
}

// tagOf is the tag of hash h: its top byte, 0 taken as 1 (0 marks an
// empty entry). The bucket comes from the low bits.
func tagOf(h uint64) uint8 {
	t := uint8(h >> 56)
	if t == 0 {
		t = 1
	}
	return t
}

// matchTags returns the entries of b whose tag is t, as the high bit of
// byte i for entry i (entries 8 to 11 in the second word).
func matchTags(b *pathBucket, t uint8) (lo, hi uint64) {
	return matchBytes(binary.LittleEndian.Uint64(b.tags[:8]), t),
		matchBytes(uint64(binary.LittleEndian.Uint32(b.tags[8:])), t) & 0x80808080
}

// matchBytes sets the high bit of each byte of w equal to t, and only of
// those.
func matchBytes(w uint64, t uint8) uint64 {
	x := w ^ tagLSB*uint64(t)
	return ^((x&tagLow + tagLow) | x | tagLow)
}

// find returns the child of parent named name (the table flushed).
func (x *pathIndex) find(s *state, parent uint32, name []byte) (uint32, bool) {
	h := x.hash(parent, name)
	t := tagOf(h)
	m := uint64(len(x.buckets) - 1)
	for i := h & m; ; i = (i + 1) & m {
		b := &x.buckets[i]
		lo, hi := matchTags(b, t)
		for ; lo != 0; lo &= lo - 1 {
			if c := b.slots[bits.TrailingZeros64(lo)>>3]; s.isKid(c, parent, name) {
				return c, true
			}
		}
		for ; hi != 0; hi &= hi - 1 {
			if c := b.slots[8+bits.TrailingZeros64(hi)>>3]; s.isKid(c, parent, name) {
				return c, true
			}
		}
		if b.overflow == 0 {
			return 0, false
		}
	}
}

// guessDepth is the deepest path find takes in two passes: its
// candidates are on the stack.
const guessDepth = 16

// resolve finds the slot at a valid path other than "/" in two passes: the
// first takes, level by level, the first entry whose tag matches without
// reading its rec, and the second checks every candidate's parent and
// name. Only the buckets are read one after another (a level's bucket
// depends on the slot found at the level above); the candidates' recs and
// names are read together, so that their cache misses overlap instead of
// adding up. From the first candidate that is not the child (a tag shared
// by another entry), and for paths deeper than guessDepth, it walks level
// by level, each child checked before the next level.
func (x *pathIndex) resolve(s *state, path string) (uint32, bool) {
	var cands [guessDepth]uint32
	var ends [guessDepth]int
	m := uint64(len(x.buckets) - 1)
	parent := uint32(rootSlot)
	depth := 0
	missing := false // the last level has no entry with its tag
	for start := 1; depth < guessDepth; {
		end := start
		for end < len(path) && path[end] != '/' {
			end++
		}
		h := x.hash(parent, unsafeBytes(path[start:end]))
		t := tagOf(h)
		for i := h & m; ; i = (i + 1) & m {
			b := &x.buckets[i]
			lo, hi := matchTags(b, t)
			if lo != 0 {
				parent = b.slots[bits.TrailingZeros64(lo)>>3]
				break
			}
			if hi != 0 {
				parent = b.slots[8+bits.TrailingZeros64(hi)>>3]
				break
			}
			if b.overflow == 0 {
				missing = true
				break
			}
		}
		if missing {
			break
		}
		cands[depth], ends[depth] = parent, end
		depth++
		if end == len(path) {
			break
		}
		start = end + 1
	}
	parent = rootSlot
	start := 1
	for d := range depth {
		c := cands[d]
		if !s.isKid(c, parent, unsafeBytes(path[start:ends[d]])) {
			return s.walk(parent, path[start:])
		}
		parent, start = c, ends[d]+1
	}
	if missing {
		return 0, false // the levels above are right: this child does not exist
	}
	if start <= len(path) { // deeper than guessDepth
		return s.walk(parent, path[start:])
	}
	return parent, true
}

// isKid reports whether the node at slot (an indexed, live one) is the
// child of parent named name.
func (s *state) isKid(slot, parent uint32, name []byte) bool {
	r := s.at(slot)
	return r.parent == parent && bytes.Equal(s.name(slot), name)
}

// put puts an entry counted in n in a bucket; the table has room (see
// add).
func (x *pathIndex) put(h uint64, slot uint32) {
	t := tagOf(h)
	m := uint64(len(x.buckets) - 1)
	for i := h & m; ; i = (i + 1) & m {
		b := &x.buckets[i]
		lo, hi := matchTags(b, 0)
		j := -1
		if lo != 0 {
			j = bits.TrailingZeros64(lo) >> 3
		} else if hi != 0 {
			j = 8 + bits.TrailingZeros64(hi)>>3
		}
		if j >= 0 {
			b.tags[j], b.slots[j] = t, slot
			return
		}
		b.overflow++
	}
}

// flush puts the pending entries in their buckets. It reads their home
// buckets first, in a loop of independent loads whose cache misses
// overlap, and then puts the entries in buckets that are in the cache.
func (x *pathIndex) flush() {
	m := uint64(len(x.buckets) - 1)
	var sum uint32
	for _, e := range x.pending {
		sum += x.buckets[e.h&m].overflow
	}
	x.touched = sum
	for _, e := range x.pending {
		x.put(e.h, e.slot)
	}
	x.pending = x.pending[:0]
}

// limit is the number of entries the table takes before it doubles.
func (x *pathIndex) limit() int {
	return len(x.buckets) * bucketSlots * pathLoadNum / pathLoadDen
}

// bucketsFor returns the number of buckets for n entries.
func bucketsFor(n int) int {
	per := bucketSlots * pathLoadNum / pathLoadDen
	nb := 1
	for nb*per < n {
		nb <<= 1
	}
	return nb
}

// add indexes slot as the child of parent named name (pending, see
// flush); its rec says so already. When the table is full it is rebuilt
// twice as large from the recs of src below upTo (slot included), which
// must all be indexed (pending ones included) or marked free or noParent.
func (x *pathIndex) add(src slotSource, upTo, slot, parent uint32, name []byte) {
	if x.n >= x.limit() {
		x.rebuild(src, upTo, 2*len(x.buckets))
		return
	}
	x.pending = append(x.pending, pendingEntry{x.hash(parent, name), slot})
	x.n++
	if len(x.pending) >= pendingFlush {
		x.flush()
	}
}

// reserve makes room for n entries, rebuilding the table from the recs of
// src below upTo when it has too few buckets.
func (x *pathIndex) reserve(src slotSource, upTo uint32, n int) {
	if nb := bucketsFor(n); nb > len(x.buckets) {
		x.rebuild(src, upTo, nb)
	}
}

// rebuild makes a table of nb buckets (a power of two) and indexes the
// live, linked recs of src below upTo in it.
func (x *pathIndex) rebuild(src slotSource, upTo uint32, nb int) {
	x.buckets = nil // the old table goes before the new one is made
	x.buckets = make([]pathBucket, nb)
	x.n = 0
	x.pending = x.pending[:0]
	for slot := range upTo {
		r := src.at(slot)
		if r.id == 0 || r.id == rootID || r.parent == noParent {
			continue
		}
		if x.n >= x.limit() { // more than nb take: start over, larger
			x.rebuild(src, upTo, 2*nb)
			return
		}
		x.pending = append(x.pending, pendingEntry{x.hash(r.parent, src.name(slot)), slot})
		x.n++
		if len(x.pending) >= pendingFlush {
			x.flush()
		}
	}
	x.flush()
}

// remove drops the entry of slot, the child of parent named name.
func (x *pathIndex) remove(slot, parent uint32, name []byte) {
	x.flush()
	h := x.hash(parent, name)
	t := tagOf(h)
	m := uint64(len(x.buckets) - 1)
	home := h & m
	for i := home; ; i = (i + 1) & m {
		b := &x.buckets[i]
		for j := range bucketSlots {
			if b.tags[j] == t && b.slots[j] == slot {
				b.tags[j], b.slots[j] = 0, 0
				for k := home; k != i; k = (k + 1) & m {
					x.buckets[k].overflow--
				}
				x.n--
				return
			}
		}
		if b.overflow == 0 {
			panic("catalog: removing a child the path index does not hold") // internal invariant
		}
	}
}
