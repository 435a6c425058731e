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
)

// The catalog digest.
//
// A tree's digest is the sum, modulo 2^256, of one element hash for each
// node and one for each secondary index definition. A node's element hash
// is SHA-256 of its canonical encoding:
//
//	'N' path:str kind:str created:u64be modified:u64be nattrs:uvarint (key:str value)*
//
// with the attributes in increasing key-name order and each value in its
// encoded form (type byte, then the payload in its shortest varint form,
// which is also the form nodes keep and images carry). An index
// definition's is SHA-256 of 'X' kind:str attr:str. An owned node adds
// the element of its ownership, SHA-256 of 'O' owned:u64be owner:u64be
// orphan:byte by node ids (replicated: Apply assigns them in log order and
// images carry them), so an owned node digests differently from the same
// node unowned. Nothing local enters it: not slots, node ids (but in
// ownerships), the order attribute keys and kinds were interned in, or map
// iteration order; so every replica holding the same
// catalog holds the same digest, whether it replayed the log or loaded an
// image.
//
// A sum is kept current as batches apply: a created node adds its element
// hash, a deleted one subtracts it, a changed one subtracts the old and
// adds the new, and a failed batch restores the sum it started with. The
// cost of a batch is one hash per node it touches (a move touches the
// moved subtree, whose paths change, as its path index entries do).

// Digest is a digest of a whole catalog: every node's path, kind,
// attributes, created and modified indexes, and the secondary index
// definitions. Two trees with the same content have the same Digest; see
// the package documentation for why two trees with different content have
// different ones except with negligible probability. Ownerships (see Owner)
// are part of the content.
type Digest [32]byte

// String returns the digest in hex.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// ParseDigest parses the hex form String returns.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	if len(s) != 2*len(d) {
		return Digest{}, fmt.Errorf("%w: digest %q: want %d hex digits, have %d", ErrInvalid, s, 2*len(d), len(s))
	}
	if _, err := hex.Decode(d[:], []byte(s)); err != nil {
		return Digest{}, fmt.Errorf("%w: digest %q: %w", ErrInvalid, s, err)
	}
	return d, nil
}

// Digest returns the index of the last applied batch and the digest of the
// catalog as of that index, read together.
func (t *Tree) Digest() (index uint64, d Digest) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.s.index, t.s.digest.bytes()
}

// sum256 is a 256-bit integer in little-endian 64-bit limbs: the running
// sum of element hashes.
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

func (a *sum256) bytes() Digest {
	var d Digest
	for i, l := range a {
		binary.LittleEndian.PutUint64(d[8*i:], l)
	}
	return d
}

// digester hashes nodes and keeps the scratch it needs; the applier owns
// one (Tree.dg), and a full recompute makes its own.
type digester struct {
	// off leaves the digest as it is: only BenchmarkDorisScaleDigest sets
	// it, on a tree of its own, to measure what keeping the digest costs.
	off   bool
	buf   []byte
	path  []byte
	attrs []digestAttr
}

// digestAttr is one attribute of a node whose blob is not in key-name
// order, gathered to be sorted.
type digestAttr struct {
	name string
	val  []byte
}

// nodeHash returns the element hash of the node at slot, whose path is
// path.
func (g *digester) nodeHash(s *state, slot uint32, path []byte) [sha256.Size]byte {
	r := s.at(slot)
	b := append(g.buf[:0], 'N')
	b = binary.AppendUvarint(b, uint64(len(path)))
	b = append(b, path...)
	b = appendStr(b, s.kinds[r.kind])
	b = binary.BigEndian.AppendUint64(b, r.created)
	b = binary.BigEndian.AppendUint64(b, r.modified)
	_, attrs := splitBlob(s.blob(r))
	it := newAttrIter(attrs)
	b = binary.AppendUvarint(b, uint64(it.n))
	mark := len(b)
	prev, sorted := "", true
	for i := 0; ; i++ {
		k, v, ok := it.next()
		if !ok {
			break
		}
		name := s.keys[k]
		if i > 0 && name <= prev {
			sorted = false
		}
		prev = name
		b = appendStr(b, name)
		b = append(b, v...)
	}
	if !sorted {
		// Blobs keep their attributes in key-name order; should one not,
		// the encoding is still canonical.
		b = g.sortedAttrs(s, b[:mark], attrs)
	}
	h := sha256.Sum256(b)
	g.buf = b
	if cap(b) > 1<<20 { // a node of megabytes of attributes
		g.buf = nil
	}
	return h
}

func (g *digester) sortedAttrs(s *state, b, attrs []byte) []byte {
	g.attrs = g.attrs[:0]
	it := newAttrIter(attrs)
	for {
		k, v, ok := it.next()
		if !ok {
			break
		}
		g.attrs = append(g.attrs, digestAttr{name: s.keys[k], val: v})
	}
	slices.SortFunc(g.attrs, func(x, y digestAttr) int { return strings.Compare(x.name, y.name) })
	for _, a := range g.attrs {
		b = appendStr(b, a.name)
		b = append(b, a.val...)
	}
	clear(g.attrs)
	return b
}

// indexHash returns the element hash of the secondary index on (kind,
// attr).
func (g *digester) indexHash(kind, attr string) [sha256.Size]byte {
	b := append(g.buf[:0], 'X')
	b = appendStr(b, kind)
	b = appendStr(b, attr)
	g.buf = b
	return sha256.Sum256(b)
}

// node adds (or subtracts) the element hash of the node at slot.
func (g *digester) node(s *state, slot uint32, path string, add bool) {
	if g.off {
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

// subtree adds (or subtracts) the element hashes of the node at slot,
// whose path is path, and of all its descendants.
func (g *digester) subtree(s *state, slot uint32, path string, add bool) {
	if g.off {
		return
	}
	g.path = append(g.path[:0], path...)
	var d sum256
	g.walk(s, slot, &d)
	if add {
		s.digest.plus(d)
	} else {
		s.digest.minus(d)
	}
}

// walk adds to d the element hashes of the node at slot, whose path is
// g.path, and of its descendants; g.path is as it was when walk returns.
func (g *digester) walk(s *state, slot uint32, d *sum256) {
	h := g.nodeHash(s, slot, g.path)
	d.add(&h)
	kids := s.kidsOf(slot)
	if len(kids) == 0 {
		return
	}
	n := len(g.path)
	for _, k := range kids {
		g.path = g.path[:n]
		if n > 1 { // below the root, "/" separates; the root's path is "/" itself
			g.path = append(g.path, '/')
		}
		g.path = append(g.path, s.name(k)...)
		g.walk(s, k, d)
	}
	g.path = g.path[:n]
}

// index adds (or subtracts) the element hash of an index definition.
func (g *digester) index(s *state, kind, attr string, add bool) {
	if g.off {
		return
	}
	h := g.indexHash(kind, attr)
	if add {
		s.digest.add(&h)
	} else {
		s.digest.sub(&h)
	}
}

// computeDigest returns the digest of s from scratch: Load's way to set
// it, and the tests' to check the incremental one.
func (s *state) computeDigest() sum256 {
	var g digester
	var d sum256
	if s.nslots == 0 || s.at(rootSlot).id != rootID {
		return d
	}
	g.path = append(g.path, '/')
	g.walk(s, rootSlot, &d)
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
		h := g.indexHash(def[0], def[1])
		d.add(&h)
	}
	s.own.each(func(slot uint32, l ownLink) {
		h := linkHash(s.at(slot).id, l)
		d.add(&h)
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

// SetAttrForTesting sets attribute attr of the node at path to v in place,
// outside any batch: the index and the node's modified index stay as they
// are, no watcher hears of it, and the digest follows the new content, as
// it would on a replica whose applier decided differently. It exists for
// tests of the checks that compare replicas, which need one replica to
// differ; nothing else may call it.
func (t *Tree) SetAttrForTesting(path, attr string, v Value) error {
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
	slot, ok := s.resolve(path)
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, path)
	}
	o := rawOp{typ: OpUpdate, path: path, set: []kv{{k: attr, v: v}}}
	wOn := t.wOn
	t.wOn = false
	defer func() { t.wOn = wOn }()
	t.undo, t.undoOld = t.undo[:0], t.undoOld[:0]
	err := t.update(s, s.at(slot).modified, slot, &o)
	t.undo, t.undoOld = t.undo[:0], t.undoOld[:0]
	return err
}

// StateDigest returns the digest's bytes as of the last applied batch: the
// journal.Digester hook, through which the journal compares replicas.
func (t *Tree) StateDigest() []byte {
	_, d := t.Digest()
	return d[:]
}
