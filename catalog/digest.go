package catalog

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// The catalog digest.
//
// A tree's digest is the sum of one element hash for each node, one for
// each secondary index definition and one for each ownership, in one of
// two formats.
//
// Format 1 (DigestV1) sums modulo 2^256 SHA-256 hashes of canonical
// encodings. A node's is
//
//	'N' path:str kind:str created:u64be modified:u64be nattrs:uvarint (key:str value)*
//
// with the attributes in increasing key-name order and each value in its
// encoded form (type byte, then the payload in its shortest varint form,
// which is also the form nodes keep and images carry). An index
// definition's is 'X' kind:str attr:str, an ownership's 'O' owned:u64be
// owner:u64be orphan:byte by node ids. Nothing else local enters it: not
// slots, node ids (but in ownerships), the order attribute keys and kinds
// were interned in, or map iteration order. A node's element holds its
// whole path, so a move changes the elements of the moved subtree.
//
// Format 2 (DigestV2) sums modulo 2^128 128-bit element hashes: XXH3-128
// (github.com/zeebo/xxh3) of an element's encoding seeded with digestSeed,
// the low 64 bits in the low half of the sum. A node's encoding is
//
//	'N' id:u64le parent:u64le created:u64le modified:u64le kind:str name:str nattrs:uvarint (key:str value)*
//
// by its id and its parent's id (0 for the root) instead of its path, the
// attributes as in format 1; an index definition's and an ownership's are
// format 1's. Node ids are replicated: Apply assigns them from a counter in
// log order, images carry them and a move keeps them, so every correct
// replica agrees on them as on the rest. The set of (id, parent, name)
// triples is the tree's shape, so the element of every node still pins its
// path; a move changes the moved node's element only, and a node's
// element costs no path and one pass over its attributes (kept in key-name
// order in its blob). A create's element costs not even that pass: the
// attributes' part of the encoding is, byte for byte, the set the create's
// entry carries (canonical: keys in increasing order, shortest varints),
// which it hashes as read (digester.created); an update builds the node's
// elements before and after in the passes its merge of the attributes
// makes anyway (digester.updating).
//
// In both formats every replica holding the same catalog holds the same
// digest, whether it replayed the log or loaded an image. A tree keeps one
// format's sum current as batches apply: a created node adds its element
// hash, a deleted one subtracts it, a changed one subtracts the old and
// adds the new, and a failed batch restores the sum it started with. The
// other format is computed from scratch when asked for (digestOf), and
// StateDigestOf, the journal's question at a check mark, makes the format
// it asks for the kept one. A new tree, and one Load or Stage fills,
// keeps the newest format.

// DigestFormat names one of the ways to compute a Digest (see digest.go).
type DigestFormat uint8

const (
	// DigestV1 is format 1: SHA-256 of each node's path and content,
	// summed modulo 2^256 (32 bytes). Clusters below journal format
	// version 5 compare it.
	DigestV1 DigestFormat = 1
	// DigestV2 is format 2: a 128-bit XXH3 hash of each node's id,
	// parent id, name and content, summed modulo 2^128 (16 bytes): the
	// same guarantees at a fraction of the applier's time.
	DigestV2 DigestFormat = 2
	// NewestDigest is the newest format: Tree.Digest's.
	NewestDigest = DigestV2
)

// size is the length of the format's digest in bytes (0: no format).
func (f DigestFormat) size() int {
	switch f {
	case DigestV1:
		return 32
	case DigestV2:
		return 16
	}
	return 0
}

func (f DigestFormat) valid() error {
	if f.size() == 0 {
		return fmt.Errorf("%w: digest format %d (this code computes %d to %d)", ErrInvalid, f, DigestV1, NewestDigest)
	}
	return nil
}

// Digest is a digest of a whole catalog in one format: every node's path,
// kind, attributes, created and modified indexes, the secondary index
// definitions and the ownerships (see Owner). Two trees with the same
// content have the same Digest of a format; see the package documentation
// for why two trees with different content have different ones except
// with negligible probability. Digests compare with ==, which tells
// formats apart too.
type Digest struct {
	format DigestFormat
	b      [32]byte // the first format.size() bytes
}

// Format returns the digest's format (0 for the zero Digest).
func (d Digest) Format() DigestFormat { return d.format }

// Bytes returns the digest's bytes: 32 in format 1, 16 in format 2.
func (d Digest) Bytes() []byte { return slices.Clone(d.b[:d.format.size()]) }

// String returns the digest's bytes in hex.
func (d Digest) String() string { return hex.EncodeToString(d.b[:d.format.size()]) }

// ParseDigest parses the hex form String returns; its length tells the
// format (64 hex digits: format 1, 32: format 2).
func ParseDigest(s string) (Digest, error) {
	var d Digest
	switch len(s) {
	case 2 * DigestV1.size():
		d.format = DigestV1
	case 2 * DigestV2.size():
		d.format = DigestV2
	default:
		return Digest{}, fmt.Errorf("%w: digest %q: want %d (format 1) or %d (format 2) hex digits, have %d",
			ErrInvalid, s, 2*DigestV1.size(), 2*DigestV2.size(), len(s))
	}
	if _, err := hex.Decode(d.b[:], []byte(s)); err != nil {
		return Digest{}, fmt.Errorf("%w: digest %q: %w", ErrInvalid, s, err)
	}
	return d, nil
}

// Digest returns the index of the last applied batch and the digest of the
// catalog as of that index in the newest format (NewestDigest), read
// together. A tree that keeps another format (see StateDigestOf) computes
// it, in time proportional to the catalog.
func (t *Tree) Digest() (index uint64, d Digest) {
	index, d, _ = t.digestOf(NewestDigest)
	return index, d
}

// digestOf is Digest in format f: from the sum the tree keeps when it
// keeps f, else computed from scratch under the read lock (in time
// proportional to the catalog). A format this code does not compute is
// ErrInvalid.
func (t *Tree) digestOf(f DigestFormat) (index uint64, d Digest, err error) {
	if err := f.valid(); err != nil {
		return 0, Digest{}, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := t.s
	if s.digestFormat == f {
		return s.index, s.digest.bytes(f), nil
	}
	sum := s.computeDigest(f)
	return s.index, sum.bytes(f), nil
}

// StateDigestOf returns the digest's bytes in format (a DigestFormat) as
// of the last applied batch, and keeps that format's sum from then on (a
// switch costs one computation from scratch): the journal.FormatDigester
// hook, through which the journal compares replicas at a check mark in the
// format the mark names. It returns nil for a format this code does not
// compute. Like Apply, it must not run concurrently with Apply or Load.
func (t *Tree) StateDigestOf(format int) []byte {
	f := DigestFormat(format)
	if format < 0 || format > 255 || f.valid() != nil {
		return nil
	}
	t.applyMu.Lock()
	defer t.applyMu.Unlock()
	// applyMu keeps the state as it is: the computation needs only the
	// read lock, so readers go on meanwhile.
	t.mu.RLock()
	s := t.s
	switched := s.digestFormat != f
	var sum sum256
	if switched {
		sum = s.computeDigest(f)
	}
	t.mu.RUnlock()
	if switched {
		t.mu.Lock()
		s.digest, s.digestFormat = sum, f
		t.mu.Unlock()
	}
	return s.digest.bytes(f).Bytes() // written only with applyMu held
}

// StateDigest is StateDigestOf(1): the journal.Digester hook, the digest
// of the check marks that name no format.
func (t *Tree) StateDigest() []byte { return t.StateDigestOf(int(DigestV1)) }

// digestSeed seeds the format 2 element hashes (the first digits of pi's
// fraction in hex): a constant, so every replica hashes alike, that is not
// XXH3's default.
const digestSeed = 0x243f6a8885a308d3

// sum256 is a 256-bit integer in little-endian 64-bit limbs: the running
// sum of element hashes (format 2 fills the low two limbs of each element
// and reads the low two of the sum: the sum modulo 2^128).
type sum256 [4]uint64

func (a *sum256) add(h *[sha256.Size]byte) {
	var c uint64
	for i := range a {
		a[i], c = bits.Add64(a[i], binary.LittleEndian.Uint64(h[8*i:]), c)
	}
}

func (a *sum256) sub(h *[sha256.Size]byte) {
	var b uint64
	for i := range a {
		a[i], b = bits.Sub64(a[i], binary.LittleEndian.Uint64(h[8*i:]), b)
	}
}

func (a *sum256) plus(b sum256) {
	var c uint64
	for i := range a {
		a[i], c = bits.Add64(a[i], b[i], c)
	}
}

func (a *sum256) minus(b sum256) {
	var c uint64
	for i := range a {
		a[i], c = bits.Sub64(a[i], b[i], c)
	}
}

// add128 adds (or subtracts) the 128-bit element lo, hi.
func (a *sum256) add128(lo, hi uint64, add bool) {
	if add {
		a.plus128(lo, hi)
		return
	}
	var c uint64
	a[0], c = bits.Sub64(a[0], lo, 0)
	a[1], c = bits.Sub64(a[1], hi, c)
	a[2], c = bits.Sub64(a[2], 0, c)
	a[3], _ = bits.Sub64(a[3], 0, c)
}

// plus128 adds the 128-bit element lo, hi: add128's addition, small
// enough to be inlined into the applier's path of every create.
func (a *sum256) plus128(lo, hi uint64) {
	var c uint64
	a[0], c = bits.Add64(a[0], lo, 0)
	a[1], c = bits.Add64(a[1], hi, c)
	a[2], c = bits.Add64(a[2], 0, c)
	a[3], _ = bits.Add64(a[3], 0, c)
}

// bytes returns the sum as a Digest of format f.
func (a sum256) bytes(f DigestFormat) Digest {
	d := Digest{format: f}
	for i, l := range a[:f.size()/8] {
		binary.LittleEndian.PutUint64(d.b[8*i:], l)
	}
	return d
}

// digester hashes nodes and keeps the scratch it needs; the applier owns
// one (Tree.dg), and a full recompute makes its own.
type digester struct {
	// off leaves the digest as it is: only BenchmarkDorisScaleDigest sets
	// it, on a tree of its own, to measure what keeping the digest costs.
	off bool
	// el is created's scratch: the element of a create that fits is
	// built in it, with no capacity check or growth.
	el    [256]byte
	buf   []byte
	alt   []byte // a second element's scratch: an update builds two at once
	path  []byte
	attrs []digestAttr
}

// digestAttr is one attribute of a node whose blob is not in key-name
// order, gathered to be sorted.
type digestAttr struct {
	name string
	val  []byte
}

// nodeHash returns the format 1 element hash of the node at slot, whose
// path is path.
func (g *digester) nodeHash(s *state, slot uint32, path []byte) [sha256.Size]byte {
	r := s.At(slot)
	b := append(g.buf[:0], 'N')
	b = binary.AppendUvarint(b, uint64(len(path)))
	b = append(b, path...)
	b = codec.AppendStr(b, s.kinds[r.Kind])
	b = binary.BigEndian.AppendUint64(b, r.Created)
	b = binary.BigEndian.AppendUint64(b, r.Modified)
	_, attrs := layout.SplitBlob(s.Blob(r))
	b = g.appendAttrs(s, b, attrs)
	h := sha256.Sum256(b)
	g.keep(b)
	return h
}

// nodeHash2 returns the format 2 element hash of the node at slot. It is
// on the applier's path of every create, update and move, so it walks the
// blob itself: one pass, one buffer, no call per attribute but the
// copies.
func (g *digester) nodeHash2(s *state, slot uint32) (lo, hi uint64) {
	r := s.At(slot)
	var parent uint64
	if r.ID != layout.RootID {
		parent = s.At(r.Parent).ID
	}
	kind := s.kinds[r.Kind]
	blob := s.Blob(r)
	name, attrs := layout.SplitBlob(blob)
	b := elemHead(g.buf, 2*len(blob), r.ID, parent, r.Created, r.Modified, kind, name)
	// The attributes: count, then per attribute the key number (replaced
	// by the key's name) and the encoded value, copied whole.
	n, w := binary.Uvarint(attrs)
	b = append(b, attrs[:w]...)
	// Blobs hold their attributes in strictly increasing key-name order,
	// on every replica: batches are refused unless their keys are (op.go),
	// an update merges in that order, and an image that is not is corrupt
	// (internal/imagefmt). So blob order is the canonical order, with no check here.
	p := attrs[w:]
	for i := uint64(0); i < n; i++ {
		var k uint64
		if p[0] < 0x80 {
			k, p = uint64(p[0]), p[1:]
		} else {
			k, w = binary.Uvarint(p)
			p = p[w:]
		}
		key := s.keys[k]
		var vl int
		switch ValueType(p[0]) {
		case TypeString, TypeBytes:
			if p[1] < 0x80 {
				vl = 2 + int(p[1])
			} else {
				vl = codec.ValueLen(p)
			}
		case TypeInt:
			vl = 2
			for p[vl-1] >= 0x80 {
				vl++
			}
		default:
			vl = codec.ValueLen(p)
		}
		b = elemAttr(b, key, p[:vl])
		p = p[vl:]
	}
	lo, hi = seededHash(b)
	g.keep(b)
	return lo, hi
}

// elemHead returns b[:0], grown to hold at least more bytes past the
// head, with the head of a format 2 node element appended: 'N', the node's
// id, its parent's id, its created and modified indexes, its kind and its
// name.
func elemHead(b []byte, more int, id, parent, created, modified uint64, kind string, name []byte) []byte {
	n := 33 + 2*binary.MaxVarintLen32 + len(kind) + len(name) + more
	b = b[:0]
	if cap(b) < n {
		b = make([]byte, 0, 2*n)
	}
	b = b[:33]
	b[0] = 'N'
	binary.LittleEndian.PutUint64(b[1:], id)
	binary.LittleEndian.PutUint64(b[9:], parent)
	binary.LittleEndian.PutUint64(b[17:], created)
	binary.LittleEndian.PutUint64(b[25:], modified)
	b = codec.AppendStr(b, kind)
	b = binary.AppendUvarint(b, uint64(len(name)))
	return append(b, name...)
}

// elemAttr appends one attribute to a format 2 node element: its key's
// name and its encoded value.
func elemAttr(b []byte, key string, val []byte) []byte {
	if len(key) < 0x80 {
		b = append(b, byte(len(key)))
	} else {
		b = binary.AppendUvarint(b, uint64(len(key)))
	}
	b = append(b, key...)
	return append(b, val...)
}

// created adds the element hash of the node a create op o has just made at
// slot, under the parent at parent. In format 2, when the op was decoded
// from an entry, the element's attributes are o.setEnc as is: the op's set
// holds exactly the node's attributes, and its encoding is the element's
// (the count, then each key's name and value in increasing key-name order,
// every varint in its shortest form: the decoder takes no other), so the
// element costs no pass over the blob and one copy of the attributes.
//
// An element that fits g.el, with a kind and a name shorter than 128
// bytes (one-byte lengths), is built there: the head's five fields as four
// 8-byte words and a byte, then the three strings copied. This is
// elemHead's encoding (TestDigestOfCreatesAtTheEdgesOfTheInPlaceElement)
// for fewer instructions on the applier's path of every create
// (BenchmarkDigestCreateElement).
func (g *digester) created(s *state, slot, parent uint32, o *rawOp, name string) {
	if g.off {
		return
	}
	if s.digestFormat != DigestV2 || o.setEnc == nil {
		g.node(s, slot, o.path, true)
		return
	}
	r := s.At(slot)
	id, pid := r.ID, s.At(parent).ID
	kl, nl := len(o.kind), len(name)
	n := 35 + kl + nl + len(o.setEnc)
	if kl >= 0x80 || nl >= 0x80 || n > len(g.el) {
		b := elemHead(g.buf, len(o.setEnc), id, pid, r.Created, r.Modified, o.kind, layout.UnsafeBytes(name))
		b = append(b, o.setEnc...)
		lo, hi := seededHash(b)
		g.keep(b)
		s.digest.add128(lo, hi, true)
		return
	}
	e := &g.el
	le := binary.LittleEndian
	le.PutUint64(e[0:], 'N'|id<<8)
	le.PutUint64(e[8:], id>>56|pid<<8)
	le.PutUint64(e[16:], pid>>56|r.Created<<8)
	le.PutUint64(e[24:], r.Created>>56|r.Modified<<8)
	e[32] = byte(r.Modified >> 56)
	e[33] = byte(kl)
	copy(e[34:], o.kind)
	e[34+kl] = byte(nl)
	copy(e[35+kl:], name)
	copy(e[35+kl+nl:], o.setEnc)
	s.digest.plus128(seededHash(e[:n]))
}

// updating reports whether an update builds the node's format 2 elements
// before and after the change itself (elemHead, elemAttr), in the passes
// over the attributes that its merge makes anyway, and hands them to
// changed, instead of two walks of the blobs: when the tree keeps format 2.
func (g *digester) updating(s *state) bool { return !g.off && s.digestFormat == DigestV2 }

// changed subtracts the element old and adds the element new, a node's
// format 2 encodings before and after a change, and keeps their buffers
// (g.buf and g.alt, where the update built them) for the next.
func (g *digester) changed(s *state, old, new []byte) {
	lo, hi := seededHash(old)
	s.digest.add128(lo, hi, false)
	lo, hi = seededHash(new)
	s.digest.add128(lo, hi, true)
	g.buf, g.alt = scratch(old), scratch(new)
}

// seededHash returns the format 2 hash of the element encoding b.
func seededHash(b []byte) (lo, hi uint64) {
	h := xxh3.Hash128Seed(b, digestSeed)
	return h.Lo, h.Hi
}

// keep keeps b as the scratch buffer unless it grew huge.
func (g *digester) keep(b []byte) { g.buf = scratch(b) }

// scratch returns b to be kept as a scratch buffer, or nil when it grew
// huge (for a node of megabytes of attributes).
func scratch(b []byte) []byte {
	if cap(b) > 1<<20 {
		return nil
	}
	return b
}

// appendAttrs appends the canonical encoding of a blob's attributes: their
// count, then each key's name and encoded value in key-name order.
func (g *digester) appendAttrs(s *state, b, attrs []byte) []byte {
	it := codec.NewAttrIter(attrs)
	b = binary.AppendUvarint(b, uint64(it.Len()))
	mark := len(b)
	prev, sorted := "", true
	for i := 0; ; i++ {
		k, v, ok := it.Next()
		if !ok {
			break
		}
		name := s.keys[k]
		if i > 0 && name <= prev {
			sorted = false
		}
		prev = name
		b = codec.AppendStr(b, name)
		b = append(b, v...)
	}
	if !sorted {
		// Blobs keep their attributes in key-name order; should one not,
		// the encoding is still canonical.
		b = g.sortedAttrs(s, b[:mark], attrs)
	}
	return b
}

func (g *digester) sortedAttrs(s *state, b, attrs []byte) []byte {
	g.attrs = g.attrs[:0]
	it := codec.NewAttrIter(attrs)
	for {
		k, v, ok := it.Next()
		if !ok {
			break
		}
		g.attrs = append(g.attrs, digestAttr{name: s.keys[k], val: v})
	}
	slices.SortFunc(g.attrs, func(x, y digestAttr) int { return strings.Compare(x.name, y.name) })
	for _, a := range g.attrs {
		b = codec.AppendStr(b, a.name)
		b = append(b, a.val...)
	}
	clear(g.attrs)
	return b
}

// indexElem returns the element of the secondary index on (kind, attr) in
// format f.
func (g *digester) indexElem(f DigestFormat, kind, attr string) sum256 {
	b := append(g.buf[:0], 'X')
	b = codec.AppendStr(b, kind)
	b = codec.AppendStr(b, attr)
	g.buf = b
	return elemOf(f, b)
}

// linkElem returns the element of an ownership (see linkHash) in format f.
func linkElem(f DigestFormat, owned uint64, l ownLink) sum256 {
	if f == DigestV1 {
		h := linkHash(owned, l)
		var e sum256
		e.add(&h)
		return e
	}
	var b [18]byte
	b[0] = 'O'
	binary.BigEndian.PutUint64(b[1:], owned)
	binary.BigEndian.PutUint64(b[9:], l.ownerID)
	if l.orphan {
		b[17] = 1
	}
	return elemOf(DigestV2, b[:])
}

// elemOf returns the element hash of the encoding b in format f.
func elemOf(f DigestFormat, b []byte) sum256 {
	var e sum256
	if f == DigestV1 {
		h := sha256.Sum256(b)
		e.add(&h)
		return e
	}
	e[0], e[1] = seededHash(b)
	return e
}

// node adds (or subtracts) the element hash of the node at slot, whose
// path is path (format 1 needs it).
func (g *digester) node(s *state, slot uint32, path string, add bool) {
	if g.off {
		return
	}
	if s.digestFormat == DigestV2 {
		lo, hi := g.nodeHash2(s, slot)
		s.digest.add128(lo, hi, add)
		return
	}
	g.path = append(g.path[:0], path...)
	h := g.nodeHash(s, slot, g.path)
	if add {
		s.digest.add(&h)
	} else {
		s.digest.sub(&h)
	}
}

// moved adds (or subtracts) what a move changes of the digest: the moved
// node's element in format 2, the elements of the moved subtree, whose
// paths change, in format 1. It is called before the move with the old
// path and after it with the new one.
func (g *digester) moved(s *state, slot uint32, path string, add bool) {
	if s.digestFormat == DigestV2 {
		g.node(s, slot, path, add)
		return
	}
	g.subtree(s, slot, path, add)
}

// subtree adds (or subtracts) the element hashes of the node at slot,
// whose path is path, and of all its descendants.
func (g *digester) subtree(s *state, slot uint32, path string, add bool) {
	if g.off {
		return
	}
	var d sum256
	if s.digestFormat == DigestV2 {
		g.walk2(s, slot, &d)
	} else {
		g.path = append(g.path[:0], path...)
		g.walk(s, slot, &d)
	}
	if add {
		s.digest.plus(d)
	} else {
		s.digest.minus(d)
	}
}

// walk adds to d the format 1 element hashes of the node at slot, whose
// path is g.path, and of its descendants; g.path is as it was when walk
// returns.
func (g *digester) walk(s *state, slot uint32, d *sum256) {
	h := g.nodeHash(s, slot, g.path)
	d.add(&h)
	kids := s.KidsOf(slot)
	if len(kids) == 0 {
		return
	}
	n := len(g.path)
	for _, k := range kids {
		g.path = g.path[:n]
		if n > 1 { // below the root, "/" separates; the root's path is "/" itself
			g.path = append(g.path, '/')
		}
		g.path = append(g.path, s.Name(k)...)
		g.walk(s, k, d)
	}
	g.path = g.path[:n]
}

// walk2 adds to d the format 2 element hashes of the node at slot and of
// its descendants.
func (g *digester) walk2(s *state, slot uint32, d *sum256) {
	lo, hi := g.nodeHash2(s, slot)
	d.add128(lo, hi, true)
	for _, k := range s.KidsOf(slot) {
		g.walk2(s, k, d)
	}
}

// index adds (or subtracts) the element hash of an index definition.
func (g *digester) index(s *state, kind, attr string, add bool) {
	if g.off {
		return
	}
	e := g.indexElem(s.digestFormat, kind, attr)
	if add {
		s.digest.plus(e)
	} else {
		s.digest.minus(e)
	}
}

// computeDigest returns the digest of s in format f from scratch: Load's
// way to set it, a switch of the kept format's, and the tests' to check
// the incremental one.
func (s *state) computeDigest(f DigestFormat) sum256 {
	var g digester
	var d sum256
	if s.NSlots == 0 || s.At(layout.RootSlot).ID != layout.RootID {
		return d
	}
	if f == DigestV2 {
		// Elements need no path: every live slot in turn.
		for slot := uint32(0); slot < s.NSlots; slot++ {
			if s.At(slot).ID != 0 {
				lo, hi := g.nodeHash2(s, slot)
				d.add128(lo, hi, true)
			}
		}
	} else {
		g.path = append(g.path, '/')
		g.walk(s, layout.RootSlot, &d)
	}
	// Map order does not matter to a sum, but sorting keeps the walk
	// reproducible for anyone stepping through it.
	defs := make([][2]string, 0, len(s.indexes))
	for _, x := range s.indexes {
		defs = append(defs, [2]string{x.kindName, x.keyName})
	}
	slices.SortFunc(defs, func(a, b [2]string) int {
		return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
	})
	for _, def := range defs {
		d.plus(g.indexElem(f, def[0], def[1]))
	}
	s.own.each(func(slot uint32, l ownLink) {
		d.plus(linkElem(f, s.At(slot).ID, l))
	})
	return d
}

// digestIndex adds (or subtracts) the hash of the index definition o
// names once err, the index operation's outcome, says it took effect; it
// returns err.
func (t *Tree) digestIndex(s *state, o *rawOp, err error, add bool) error {
	if err == nil {
		t.dg.index(s, o.kind, o.attr, add)
	}
	return err
}

// setAttrInPlace sets attribute attr of the node at path to v in place,
// outside any batch: the index and the node's modified index stay as they
// are, no watcher hears of it, and the digest follows the new content, as
// it would on a replica whose applier decided differently. It exists for
// tests of the checks that compare replicas, which need one replica to
// differ (catalogtest.SetAttr); nothing else calls it.
func (t *Tree) setAttrInPlace(path, attr string, v Value) error {
	if err := ValidPath(path); err != nil {
		return err
	}
	if err := validValue(attr, v); err != nil {
		return err
	}
	t.applyMu.Lock()
	defer t.applyMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.s
	slot, ok := s.Resolve(path)
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, path)
	}
	o := rawOp{typ: OpUpdate, path: path, set: []kv{{k: attr, v: v}}}
	wOn := t.wOn
	t.wOn = false
	defer func() { t.wOn = wOn }()
	t.undo, t.undoOld = t.undo[:0], t.undoOld[:0]
	err := t.update(s, s.At(slot).Modified, slot, &o)
	t.undo, t.undoOld = t.undo[:0], t.undoOld[:0]
	return err
}
