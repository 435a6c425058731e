package layout

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"iter"
	"math/bits"
	"math/rand/v2"
	"unicode/utf8"

	"github.com/metatree/metatree/catalog/internal/hugepage"
)

// PathIndex finds the node at a path in a constant number of cache
// misses, whatever the catalog's size and mostly whatever the path's depth:
// the sorted child lists (kids.go) would take a binary search a level,
// each probe a Rec and a name blob, each level waiting for the one above.
//
// It is a hash table from the hash of a node's whole path to its slot, open
// addressing over one pointer-free array of 64-byte buckets (one cache line
// each): 12 slots and a one-byte tag of the hash for each, so that a probe
// reads the Rec of a candidate only when its tag matches. The path's hash
// is a sum of one term a level (the level's depth and name, hashed), so
// that a lookup has every level's hash before reading memory and probes all
// the levels' buckets at once; it then checks every level's candidate (its
// Rec's parent is the level above's, its name the path's) with the recs and
// names read together too. The hash only picks candidates: the answer is
// exact whatever collides. Readers resolve whole paths through it
// (resolve), the applier each level its path cache does not hold
// (PathCache.Resolve). A bucket counts the entries that found it full and
// settled in a later one (its overflow); a lookup stops at the first bucket
// without any, which lets an entry be removed by clearing it, with no
// tombstones. A bucket's overflow stays while the entries that passed it
// remain, even once it has room again, so after enough churn every bucket
// may count some: a lookup also stops once it has seen every bucket.
//
// The index is local, like the slots it holds: its hash seed is random per
// process and nothing observable depends on its layout. It mirrors the
// child lists: LinkKidAt and RemoveKid keep it for the node they link or
// unlink, a move re-keys the moved node's descendants (their paths
// change), Load indexes the nodes as its linker links them, and a table
// that grows is rebuilt from the child lists. It changes only under the
// tree's write lock (or inside Load, before the state is published), so
// readers see it whole, at the same batch as the rest of the state. A
// failed batch's rollback relinks and unlinks through the same functions,
// leaving the index holding exactly the tree's nodes again (if not in the
// same buckets).
type PathIndex struct {
	buckets []pathBucket // a power of two of them
	n       int          // entries, pending ones included
	// seed keys the hash of names up to 16 bytes long (level), long
	// the hash of longer ones.
	seed [4]uint64
	long maphash.Seed
	// pending are entries added but not yet in a bucket. An insert is a
	// cache miss in a table the size of the catalog; put one by one
	// between the applier's other work, those misses add up, while
	// Flush puts them in a tight loop where they overlap. The table is
	// flushed before anything reads it or removes from it: readers only
	// ever see it flushed (Apply and Load flush before they return).
	pending []pendingEntry
	// touched keeps Flush's loads that bring the buckets into the cache:
	// the compiler drops loads whose values go nowhere.
	touched uint32
	// mask is ANDed into every hash; tests narrow it so that names
	// collide.
	mask uint64
}

// HashMask is the mask of new indexes (see PathIndex.mask).
var HashMask = ^uint64(0)

// HashSeed, when a test sets it, seeds new indexes' hashes of names up
// to 16 bytes instead of a random seed: under a narrowed mask the seed
// decides which entries collide, so a failing input reproduces only with
// its seed.
var HashSeed *[4]uint64

const (
	bucketSlots = 12
	// The table doubles before its entries fill more than 7/8 of its
	// slots: with 12 slots a bucket, few lookups go past their first.
	pathLoadNum, pathLoadDen = 7, 8
	// NoParent marks, in Load, a Rec whose parent is not linked yet.
	NoParent = ^uint32(0)

	tagLSB = 0x0101010101010101
	tagLow = 0x7f7f7f7f7f7f7f7f
)

// pendingFlush is the number of pending entries that makes Add flush.
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

func newPathIndex() PathIndex {
	x := PathIndex{
		buckets: make([]pathBucket, 1),
		seed:    [4]uint64{rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64()},
		long:    maphash.MakeSeed(),
		mask:    HashMask,
	}
	if HashSeed != nil {
		x.seed = *HashSeed
	}
	return x
}

// Source reads recs, names and child lists: the Store, or the catalog Load's
// linker (which reads the state's storage through views of its own).
type Source interface {
	At(slot uint32) *Rec
	Name(slot uint32) []byte
	KidsOf(slot uint32) []uint32
}

// Level is the term of a path's hash for the name at depth (1 for the
// root's children). A name of up to 16 bytes (most are) is hashed inline,
// as wyhash hashes short keys: its two words (nameWords), then two 128-bit
// products folded, with the seed and the name's length and depth mixed in
// (term). A longer name is hashed by maphash first.
func (x *PathIndex) Level(depth int, name []byte) uint64 {
	if len(name) > 16 {
		return x.term(depth, len(name), maphash.Bytes(x.long, name), 0)
	}
	a, b := nameWords(name)
	return x.term(depth, len(name), a, b)
}

// term is the level term of a name of n bytes at depth whose words are a
// and b.
func (x *PathIndex) term(depth, n int, a, b uint64) uint64 {
	return mum(mum(a^x.seed[0], b^x.seed[1])^x.seed[2], uint64(n)<<32^uint64(depth)^x.seed[3])
}

// nameWords returns two words that together hold every byte of a name of
// at most 16 bytes: its first and last eight, or four, or its first, middle
// and last byte in one word (1 to 3 bytes). Two names of one length are
// equal if and only if their words are.
func nameWords(name []byte) (a, b uint64) {
	switch n := len(name); {
	case n >= 8:
		return binary.LittleEndian.Uint64(name), binary.LittleEndian.Uint64(name[n-8:])
	case n >= 4:
		return uint64(binary.LittleEndian.Uint32(name)), uint64(binary.LittleEndian.Uint32(name[n-4:]))
	case n > 0:
		return uint64(name[0])<<16 | uint64(name[n>>1])<<8 | uint64(name[n-1]), 0
	}
	return 0, 0
}

// mum folds the 128-bit product of a and b into 64 bits.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// Key is the table's hash of a path whose levels' terms sum to sum.
func (x *PathIndex) Key(sum uint64) uint64 {
	h := sum ^ sum>>31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return h & x.mask
}

// PathSum returns the sum of the level terms of the path of slot, and its
// depth (0 for the root), from its ancestors' recs.
func (x *PathIndex) PathSum(src Source, slot uint32) (sum uint64, depth int, ok bool) {
	for c := slot; c != RootSlot; c = src.At(c).Parent {
		if c == NoParent {
			return 0, 0, false
		}
		depth++
	}
	d := depth
	for c := slot; c != RootSlot; c = src.At(c).Parent {
		sum += x.Level(d, src.Name(c))
		d--
	}
	return sum, depth, true
}

// childKey is the key of the child of parent named name.
func (x *PathIndex) childKey(s *Store, parent uint32, name []byte) uint64 {
	sum, depth, _ := x.PathSum(s, parent)
	return x.Key(sum + x.Level(depth+1, name))
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

// find returns the child of parent named name, whose key is h (the
// table flushed).
func (x *PathIndex) find(s *Store, h uint64, parent uint32, name []byte) (uint32, bool) {
	t := tagOf(h)
	for _, b := range x.probe(h) {
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
	}
	return 0, false
}

// probe yields the buckets an entry of key h may be in, in the order put
// tries them, each with its index: its home bucket (the low bits of h)
// and the ones after it, wrapping, until a bucket that no entry passed
// full (its overflow, read once the loop's body has run, is 0) or until
// every bucket has been yielded. It is the one probe sequence of the
// table: lookups, put and remove all walk it.
func (x *PathIndex) probe(h uint64) iter.Seq2[uint64, *pathBucket] {
	return func(yield func(uint64, *pathBucket) bool) {
		m := uint64(len(x.buckets) - 1)
		for i, left := h&m, len(x.buckets); left > 0; i, left = (i+1)&m, left-1 {
			b := &x.buckets[i]
			if !yield(i, b) || b.overflow == 0 {
				return
			}
		}
	}
}

// GuessDepth is the deepest path resolve takes in two passes: its
// candidates are on the stack.
const GuessDepth = 16

// nameEnd returns the end of the name of path that starts at start (the
// next '/' or the path's end); ok is false if that name is not a valid one
// (ValidName), and so is no node's. Checking each name as resolve reaches
// it makes a lookup one pass over the path instead of ValidPath's and
// then its own.
func nameEnd(path string, start int) (end int, ok bool) {
	end, odd := scanName(path, start)
	name := path[start:end]
	return end, validLength(name) && (!odd || validOddName(name))
}

// scanName returns the end of the name of path that starts at start, and
// whether it holds a byte outside printable ASCII (a control byte, DEL or
// a byte of a multi-byte character).
func scanName(path string, start int) (end int, odd bool) {
	for end = start; end < len(path) && path[end] != '/'; end++ {
		if path[end]-0x20 >= 0x7f-0x20 {
			odd = true
		}
	}
	return end, odd
}

// validLength reports whether name is not empty, "." or "..", nor longer
// than MaxNameLen bytes.
func validLength(name string) bool {
	n := len(name)
	return uint(n-1) < MaxNameLen && (n > 2 || name[0] != '.' || name[n-1] != '.')
}

// validOddName reports whether name, holding a byte outside printable
// ASCII, is valid: no control byte or DEL, and valid UTF-8.
func validOddName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return utf8.ValidString(name)
}

// resolve finds the slot at path (the table flushed), which is valid or
// not: a path that ValidPath rejects is found nowhere. It checks the path
// as it reads it (nameEnd) and finds the node in two passes. The first
// takes, for every level, the first entry whose tag matches without
// reading its Rec: the levels' buckets are read together. The second
// checks each candidate's parent and name, their recs and names read
// together too; a candidate that is not the node (a tag shared by another
// entry) is replaced by the one find checks entry by entry. Paths deeper
// than GuessDepth are found level by level with find.
func (x *PathIndex) resolve(s *Store, path string) (uint32, bool) {
	if len(path) < 2 || path[0] != '/' || len(path) > MaxPathLen {
		return RootSlot, path == "/"
	}
	var cands [GuessDepth]uint32
	var ends [GuessDepth]int32
	var keys [GuessDepth]uint64
	var sum uint64
	depth := 0
	for start := 1; ; {
		if depth == GuessDepth {
			return x.walk(s, path)
		}
		end, odd := scanName(path, start)
		name := path[start:end]
		if !validLength(name) || odd && !validOddName(name) {
			return 0, false // see nameEnd
		}
		if n := len(name); n <= 16 {
			a, b := nameWords(UnsafeBytes(name))
			sum += x.term(depth+1, n, a, b)
		} else {
			sum += x.Level(depth+1, UnsafeBytes(name))
		}
		h := x.Key(sum)
		t := tagOf(h)
		found := false
		for _, b := range x.probe(h) {
			lo, hi := matchTags(b, t)
			if lo != 0 {
				cands[depth], found = b.slots[bits.TrailingZeros64(lo)>>3], true
				break
			}
			if hi != 0 {
				cands[depth], found = b.slots[8+bits.TrailingZeros64(hi)>>3], true
				break
			}
		}
		if !found {
			// No entry has the tag: nothing is at this level's path.
			return 0, false
		}
		keys[depth], ends[depth] = h, int32(end)
		depth++
		if end == len(path) {
			break
		}
		start = end + 1
	}
	parent := uint32(RootSlot)
	start := 1
	slab, chunks := s.Slab, s.Arena.Chunks
	for d := range depth {
		c := cands[d]
		name := UnsafeBytes(path[start:ends[d]])
		// isKid, inline for names of up to 16 bytes (a call a level
		// costs the loop a good part of its time).
		r := &slab[c>>SlabBits][c&(SlabSize-1)]
		kid := r.Parent == parent
		if n := len(name); kid && n <= 16 {
			b := chunks[r.Blob>>32][uint32(r.Blob):]
			pa, pb := nameWords(name)
			kid = len(b) > n && b[0] == byte(n)
			if kid {
				ba, bb := nameWords(b[1 : 1+n])
				kid = pa == ba && pb == bb
			}
		} else if kid {
			kid = s.isKid(c, parent, name)
		}
		if !kid {
			var ok bool
			if c, ok = x.find(s, keys[d], parent, name); !ok {
				return 0, false
			}
		}
		parent, start = c, int(ends[d])+1
	}
	return parent, true
}

// walk is resolve level by level, each level's node found by find.
func (x *PathIndex) walk(s *Store, path string) (uint32, bool) {
	slot := uint32(RootSlot)
	var sum uint64
	depth := 0
	for start := 1; ; {
		end, ok := nameEnd(path, start)
		if !ok {
			return 0, false
		}
		name := UnsafeBytes(path[start:end])
		depth++
		sum += x.Level(depth, name)
		if slot, ok = x.find(s, x.Key(sum), slot, name); !ok {
			return 0, false
		}
		if end == len(path) {
			return slot, true
		}
		start = end + 1
	}
}

// isKid reports whether the node at slot (an indexed, live one) is the
// child of parent named name. A name of up to 16 bytes (most are) is
// compared in place, by its words (nameWords): its blob starts with its
// length in one byte.
func (s *Store) isKid(slot, parent uint32, name []byte) bool {
	r := s.At(slot)
	if r.Parent != parent {
		return false
	}
	n := len(name)
	if n > 16 {
		return bytes.Equal(s.Name(slot), name)
	}
	b := s.Arena.Chunks[r.Blob>>32][uint32(r.Blob):]
	if len(b) <= n || b[0] != byte(n) {
		return false
	}
	pa, pb := nameWords(name)
	ba, bb := nameWords(b[1 : 1+n])
	return pa == ba && pb == bb
}

// put puts an entry counted in n in a bucket; the table has room (see
// add).
func (x *PathIndex) put(h uint64, slot uint32) {
	t := tagOf(h)
	// A full bucket's overflow counts the entry before probe reads it, so
	// the probe goes on to the next.
	for _, b := range x.probe(h) {
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
	panic("catalog: the path index has no room for an entry") // internal invariant: reserve makes room
}

// Flush puts the pending entries in their buckets. It reads their home
// buckets first, in a loop of independent loads whose cache misses
// overlap, and then puts the entries in buckets that are in the cache.
func (x *PathIndex) Flush() {
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
func (x *PathIndex) limit() int {
	return len(x.buckets) * bucketSlots * pathLoadNum / pathLoadDen
}

// BucketsFor returns the number of buckets for n entries.
func BucketsFor(n int) int {
	per := bucketSlots * pathLoadNum / pathLoadDen
	nb := 1
	for nb*per < n {
		nb <<= 1
	}
	return nb
}

// Add indexes slot under key h (pending, see Flush). The table has room
// for it: create reserves room first, and the other callers put back as
// many entries as they removed in the same batch or op.
func (x *PathIndex) Add(h uint64, slot uint32) {
	x.pending = append(x.pending, pendingEntry{h, slot})
	x.n++
	if len(x.pending) >= pendingFlush {
		x.Flush()
	}
}

// Reserve makes room for n entries, rebuilding the table from the child
// lists of src (every node linked below the root is indexed) when it has
// too few buckets.
func (x *PathIndex) Reserve(src Source, n int) {
	if nb := BucketsFor(n); nb > len(x.buckets) {
		x.Rebuild(src, nb)
	}
}

// Rebuild makes a table of nb buckets (a power of two) and indexes the
// nodes linked below the root in the child lists of src.
func (x *PathIndex) Rebuild(src Source, nb int) {
	x.buckets = nil // the old table goes before the new one is made
	x.buckets = hugepage.Make[pathBucket](nb)
	x.n = 0
	x.pending = x.pending[:0]
	if !x.addBelow(src, RootSlot, 0, 0, true) {
		x.Rebuild(src, 2*nb) // more nodes than nb buckets take
	}
}

// addBelow indexes the descendants of slot, whose path's terms sum to sum
// at depth, or removes their entries (add false). Adding stops, with
// false, if the table fills.
func (x *PathIndex) addBelow(src Source, slot uint32, sum uint64, depth int, add bool) bool {
	type frame struct {
		slot  uint32
		depth int
		sum   uint64
	}
	stack := []frame{{slot, depth, sum}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range src.KidsOf(f.slot) {
			cs := f.sum + x.Level(f.depth+1, src.Name(c))
			if add {
				if x.n >= x.limit() {
					return false
				}
				x.Add(x.Key(cs), c)
			} else {
				x.remove(x.Key(cs), c)
			}
			if src.At(c).Kids != 0 {
				stack = append(stack, frame{c, f.depth + 1, cs})
			}
		}
	}
	x.Flush()
	return true
}

// RekeyBelow removes (add false) or adds the entries of the descendants of
// slot: a move changes their paths. It is called with the node where it is
// (removing) and where it went (adding).
func (s *Store) RekeyBelow(slot uint32, add bool) {
	if s.At(slot).Kids == 0 {
		return
	}
	x := &s.Paths
	sum, depth, _ := x.PathSum(s, slot)
	if !x.addBelow(s, slot, sum, depth, add) {
		// The entries put back are those just removed.
		panic("catalog: the path index filled while re-keying a move") // internal invariant
	}
}

// remove drops the entry of slot, whose key is h.
func (x *PathIndex) remove(h uint64, slot uint32) {
	x.Flush()
	t := tagOf(h)
	m := uint64(len(x.buckets) - 1)
	home := h & m
	for i, b := range x.probe(h) {
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
	}
	panic("catalog: removing a child the path index does not hold") // internal invariant
}

// Len returns the number of entries, pending ones included.
func (x *PathIndex) Len() int { return x.n }
