package imagefmt

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"strings"
	"unsafe"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/layout"
	"github.com/metatree/metatree/internal/operr"
)

// Tree is what a Decoder asks of the tree its records go into: the tree's
// numbers for kinds and attribute keys, their names, the keys of its
// secondary indexes, and its rule for names. The Decoder asks rarely: once
// a dictionary entry, once a kind, and on the careful path.
type Tree interface {
	// InternKind and InternKey return the tree's number for a kind or a
	// key, numbering it if it is new.
	InternKind(name string) uint32
	InternKey(name string) uint32
	// Kinds and Keys return the names by number.
	Kinds() []string
	Keys() []string
	// IndexKeys returns the keys of the secondary indexes of a kind.
	IndexKeys(kind uint32) []uint32
	// ValidName is catalog.ValidName.
	ValidName(name string) error
}

// FindValue in Decoder.Vals: the decoder did not locate the value, and the
// tree finds it in the blob.
const FindValue = ^uint64(0)

// A Decoder reads an image body: NewDecoder reads up to the header, Begin
// names the tree and its store, and Next, FastRecord and Record read the
// blocks and their records up to the end block, each record into a new
// slot of the store (its Rec, with no parent or children yet, and its blob
// in the Arena).
type Decoder struct {
	br      *BlockReader
	careful bool // never take the fast path (see NewDecoder)
	version byte
	header  Header
	// Links holds the ownerships of the 'O' blocks read, by owned id.
	Links     []Link
	prevOwned uint64
	// Of the record decoded last: its slot, its parent's id, and what it
	// adds to the tree's size (its blob with each key counted by its name:
	// see catalog's keyCost). Vals has one entry per secondary index of
	// its kind (Tree.IndexKeys, in that order): where the indexed value
	// is in the blob (start<<32 | end), 0 if the node has no such
	// attribute, FindValue if the tree must look; it is valid until the
	// next record.
	Slot   uint32
	Parent uint64
	Size   int
	Vals   []uint64

	t       Tree
	st      *layout.Store
	maxBlob int    // the most a record's Size may be
	n       uint64 // the records decoded
	prevID  uint64
	kinds   []uint32 // dictionary ref -> tree's kind
	keys    []uint32 // dictionary ref -> tree's key
	blob    []byte

	// By tree kind: its secondary index keys and the set of them below
	// 0x80 as a bit mask; scratch for where the record's indexed values
	// are (see Decoder.Vals).
	xs    [][]uint32
	masks [][2]uint64
	vals  []uint64

	// See keyTables; nkeys is len(keys) when they were made.
	keyByte  [0x80]byte
	rank     [0x80]uint32
	keyExtra [0x80]uint16
	nkeys    int
	kpos     []uint32 // scratch: offset<<8 | tree key of the record's keys
}

// NewDecoder reads the magic, the version and the header block of a body
// from r. verify=false skips the checksums (for fuzzing the decoding behind
// them); careful decodes every record with the careful decoder, for tests
// that check the fast path against it.
func NewDecoder(r io.Reader, verify, careful bool) (*Decoder, error) {
	var head [len(Magic) + 1]byte
	if n, err := io.ReadFull(r, head[:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w: truncated header (%d bytes)", ErrCorrupt, n)
		}
		return nil, operr.Errorf("catalog: load: %w", err)
	}
	if string(head[:len(Magic)]) != Magic {
		return nil, fmt.Errorf("%w: not a catalog image (magic %q)", ErrCorrupt, head[:len(Magic)])
	}
	v := head[len(Magic)]
	if v < V1 || v > Version {
		return nil, fmt.Errorf("%w: image version %d (this code reads %d to %d)", codec.ErrUnknownVersion, v, V1, Version)
	}
	d := &Decoder{
		br:      &BlockReader{r: r, off: int64(len(head)), verify: verify},
		careful: careful,
		version: v,
	}
	if err := d.readHeader(); err != nil {
		return nil, err
	}
	return d, nil
}

// Header returns what the header block says.
func (d *Decoder) Header() Header { return d.header }

// Corrupt returns ErrCorrupt at the decoder's position (see
// BlockReader.Corrupt).
func (d *Decoder) Corrupt(format string, args ...any) error { return d.br.Corrupt(format, args...) }

// Pos is BlockReader.Pos.
func (d *Decoder) Pos() (blocks int, off int64) { return d.br.Pos() }

func (d *Decoder) readHeader() error {
	br := d.br
	p, err := br.Next()
	if err != nil {
		return err
	}
	r := &codec.Reader{Data: p}
	if len(p) == 0 || p[0] != BlockHeader {
		return br.Corrupt("first block is not the header")
	}
	r.Off = 1
	h := &d.header
	h.Index = r.Uvarint("index")
	h.NextID = r.Uvarint("next id")
	h.Count = r.Uvarint("node count")
	ndefs := r.Uvarint("index count")
	if r.Err == nil && ndefs > uint64(len(p)) {
		r.Fail("index count %d impossible", ndefs)
	}
	for i := 0; i < int(ndefs) && r.Err == nil; i++ {
		k := r.Str("index kind", layout.MaxNameLen)
		a := r.Str("index attr", layout.MaxNameLen)
		h.Defs = append(h.Defs, [2]string{k, a})
	}
	if r.Err == nil && r.Off != len(p) {
		r.Fail("%d trailing bytes in header", len(p)-r.Off)
	}
	if r.Err != nil {
		return br.Corrupt("header: %s", Detail(r.Err))
	}
	if h.NextID <= layout.RootID || h.Count == 0 || h.Count > h.NextID-1 {
		return br.Corrupt("header: next id %d with %d nodes", h.NextID, h.Count)
	}
	if h.NextID > layout.IDLimit {
		// No tree hands out such ids (create stops at the limit), and a
		// tree that did could not save or grow (see layout.IDLimit).
		return br.Corrupt("header: next id %d beyond the ids a tree hands out (below %d)", h.NextID, uint64(layout.IDLimit))
	}
	return nil
}

// Begin names the tree the records go into, the store that holds its
// nodes, and the most a record's Size may be.
func (d *Decoder) Begin(t Tree, st *layout.Store, maxBlob int) {
	d.t, d.st, d.maxBlob = t, st, maxBlob
	d.keyTables()
}

// Next reads the blocks up to the next block of records and returns its
// records, for FastRecord and Record; done is true when it read the end
// block instead, which checks that the image held what its header and end
// block say.
func (d *Decoder) Next() (records []byte, done bool, err error) {
	br := d.br
	for {
		p, err := br.Next()
		if err != nil {
			return nil, false, err
		}
		switch p[0] {
		case BlockNodes:
			if len(d.Links) > 0 {
				return nil, false, br.Corrupt("nodes after the ownerships")
			}
			return p[1:], false, nil
		case BlockLinks:
			if d.version < Version || len(p) == 1 {
				return nil, false, br.Corrupt("ownerships in a version %d image, or none in the block", d.version)
			}
			if err := d.links(p[1:]); err != nil {
				return nil, false, err
			}
		case BlockEnd:
			r := &codec.Reader{Data: p, Off: 1}
			n := r.Uvarint("end node count")
			blocks := r.Uvarint("end block count")
			if r.Err == nil && r.Off != len(p) {
				r.Fail("%d trailing bytes in end block", len(p)-r.Off)
			}
			if r.Err != nil {
				return nil, false, br.Corrupt("end: %s", Detail(r.Err))
			}
			if d.version >= Version && len(d.Links) == 0 {
				// Save writes version 1 when nothing is owned.
				return nil, false, br.Corrupt("a version %d image without ownerships", d.version)
			}
			if n != d.header.Count || d.n != n || blocks != uint64(br.blocks-1) {
				return nil, false, br.Corrupt("end: %d nodes in %d blocks, read %d nodes in %d blocks (header says %d nodes)", n, blocks, d.n, br.blocks-1, d.header.Count)
			}
			return nil, true, nil
		default:
			return nil, false, br.Corrupt("unknown block type %q", p[0])
		}
	}
}

// links decodes an 'O' block into Links.
func (d *Decoder) links(p []byte) error {
	r := &codec.Reader{Data: p}
	for r.Off < len(p) && r.Err == nil {
		delta := r.Uvarint("owned id delta")
		owner := r.Uvarint("owner id")
		orphan := r.Byte("orphan flag")
		if r.Err != nil {
			break
		}
		if delta == 0 || orphan > 1 {
			return d.br.Corrupt("ownership %d: owned id not increasing or orphan flag %d", len(d.Links), orphan)
		}
		d.prevOwned += delta
		d.Links = append(d.Links, Link{Owned: d.prevOwned, Owner: owner, Orphan: orphan})
	}
	if r.Err != nil {
		return d.br.Corrupt("ownerships: %s", Detail(r.Err))
	}
	return nil
}

// Record decodes the record at p[off:], p being what Next returned, into
// a new slot, and returns the offset after it.
//
// Nearly every record has one shape (short name, dictionary refs already
// defined, at most 127 attributes), and FastRecord decodes that shape with
// plain offsets at a fraction of the cost: a caller tries FastRecord first
// and calls Record when it returns 0. Record decodes anything, and every
// malformed record, carefully, so that each error and its byte offset are
// the same whichever path met the record first.
func (d *Decoder) Record(p []byte, off int) (int, error) {
	if d.n >= d.header.Count {
		return 0, d.br.Corrupt("more nodes than the header's %d", d.header.Count)
	}
	next, err := d.record(p, off)
	if err != nil {
		return 0, err
	}
	d.n++
	return next, nil
}

// record decodes the record at p[off:] carefully and returns the offset
// after it.
func (d *Decoder) record(p []byte, off int) (int, error) {
	t := d.t
	// Strings view the block: names are copied into the arena and
	// dictionary entries by interning.
	r := &codec.Reader{Data: p, Off: off, View: true}
	id := d.prevID + r.Uvarint("id")
	if r.Err == nil && (id <= d.prevID || id >= d.header.NextID) {
		r.Fail("id %d out of order or beyond next id %d", id, d.header.NextID)
	}
	parent := r.Uvarint("parent")
	name := r.Str("name", layout.MaxNameLen)
	kind := d.ref(r, &d.kinds, true)
	created := r.Uvarint("created")
	modified := created + r.Uvarint("modified")
	nattrs := r.Uvarint("attribute count")
	if r.Err == nil && nattrs > uint64(len(p)-r.Off)/3 {
		r.Fail("attribute count %d impossible", nattrs)
	}
	if r.Err == nil {
		if id == layout.RootID {
			if parent != 0 || name != "" || kind != 0 {
				r.Fail("root record has parent %d, name %q, kind %q", parent, name, t.Kinds()[kind])
			}
		} else {
			if parent == 0 || name == "" || kind == 0 {
				r.Fail("node %d has parent %d, name %q, kind %q", id, parent, name, t.Kinds()[kind])
			} else if err := t.ValidName(name); err != nil {
				r.Fail("node %d: %s", id, Detail(err))
			}
		}
		if id != layout.RootID && d.n == 0 {
			r.Fail("first node is %d, not the root", id)
		}
	}
	if r.Err == nil && (modified < created || modified > d.header.Index) {
		r.Fail("node %d created %d modified %d at index %d", id, created, modified, d.header.Index)
	}
	// The blob is built straight from the record: values are copied
	// in their encoded form, keys mapped from the image's dictionary.
	b := binary.AppendUvarint(d.blob[:0], uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, nattrs)
	size := 0 // what the keys add to len(b) for the node's size
	prevKey := ""
	for i := 0; i < int(nattrs) && r.Err == nil; i++ {
		key := d.ref(r, &d.keys, false)
		st := r.Off
		r.Value("attribute value")
		if r.Err != nil {
			break
		}
		kn := t.Keys()[key]
		if i > 0 && kn <= prevKey {
			r.Fail("node %d: attribute keys out of order at %q", id, kn)
			break
		}
		prevKey = kn
		b = binary.AppendUvarint(b, uint64(key))
		size += codec.StrLen(kn) - codec.UvarintLen(uint64(key))
		b = append(b, p[st:r.Off]...)
	}
	size += len(b)
	if r.Err == nil && size > d.maxBlob {
		r.Fail("node %d: name and attributes of %d bytes (at most %d)", id, size, d.maxBlob)
	}
	d.blob = b
	if r.Err != nil {
		return 0, d.br.Corrupt("%s", Detail(r.Err))
	}
	ref, n := d.st.Arena.Put(b)
	xs, _ := d.indexesOf(kind)
	vals := d.vals[:len(xs)]
	for i := range vals {
		vals[i] = FindValue
	}
	d.add(id, parent, kind, created, modified, ref, n)
	d.Size, d.Vals = size, vals
	return r.Off, nil
}

// FastRecord is Record for a record of the common shape: it decodes the
// record at p[off:] and returns the offset after it, if the record has
// that shape and is valid; otherwise, and always for a decoder made
// careful, it returns 0 and changes nothing, and the caller decodes the
// record with Record. It accepts exactly what Record accepts (for the same
// tree and bytes, with the same result): lengths and refs that are not one
// byte, new dictionary entries, the root and a record beyond the header's
// count are simply left to Record.
func (d *Decoder) FastRecord(p []byte, off int) int {
	if d.careful || d.n >= d.header.Count {
		return 0
	}
	// The varints are read inline when they are one byte (most are): a
	// helper would not be inlined (over the compiler's budget), and this is
	// the hottest loop of a restore.
	var delta, parent, created, mdelta uint64
	if off < len(p) && p[off] < 0x80 {
		delta, off = uint64(p[off]), off+1
	} else if delta, off = codec.UvarintAt(p, off); off < 0 {
		return 0
	}
	if off < len(p) && p[off] < 0x80 {
		parent, off = uint64(p[off]), off+1
	} else if parent, off = codec.UvarintAt(p, off); off < 0 {
		return 0
	}
	id := d.prevID + delta
	if id <= d.prevID || id >= d.header.NextID || id == layout.RootID || d.n == 0 || parent == 0 || off >= len(p) {
		return 0
	}
	nl := int(p[off])
	off++
	if nl == 0 || nl >= 0x80 || nl >= len(p)-off {
		return 0
	}
	name := p[off : off+nl]
	off += nl
	kr := p[off]
	off++
	if kr >= 0x80 || int(kr) >= len(d.kinds) {
		return 0
	}
	kind := d.kinds[kr]
	if off < len(p) && p[off] < 0x80 {
		created, off = uint64(p[off]), off+1
	} else if created, off = codec.UvarintAt(p, off); off < 0 {
		return 0
	}
	if off < len(p) && p[off] < 0x80 {
		mdelta, off = uint64(p[off]), off+1
	} else if mdelta, off = codec.UvarintAt(p, off); off < 0 {
		return 0
	}
	if off >= len(p) || kind == 0 {
		return 0
	}
	modified := created + mdelta
	if modified < created || modified > d.header.Index {
		return 0
	}
	nattrs := int(p[off])
	off++
	if nattrs >= 0x80 || nattrs > (len(p)-off)/3 {
		return 0
	}
	if !plainName(name) && d.t.ValidName(unsafe.String(&name[0], nl)) != nil {
		return 0
	}
	if d.nkeys != len(d.keys) {
		d.keyTables()
	}
	xs, mask := d.indexesOf(kind)
	vals := d.vals[:len(xs)]
	clear(vals)
	// The attributes are checked first; the blob is then the name and
	// the attribute bytes as they are, with each key's dictionary ref
	// replaced by the tree key (both one byte here).
	kpos := d.kpos[:0]
	attrs := off
	size := 0 // what the keys add to the blob's length for the node's size
	prevRank := -1
	for range nattrs {
		if off >= len(p) {
			return 0
		}
		r := p[off]
		if r >= 0x80 {
			return 0
		}
		key := d.keyByte[r]
		if key >= 0x80 {
			return 0
		}
		if kr := int(d.rank[key]); kr > prevRank {
			prevRank = kr
		} else {
			return 0
		}
		kpos = append(kpos, uint32(off-attrs)<<8|uint32(key))
		size += int(d.keyExtra[key])
		off++
		st := off
		if off >= len(p) {
			return 0
		}
		switch p[off] {
		case codec.TypeInt:
			// Skip what Reader.Varint accepts: up to 10 bytes, the
			// last below 0x80 and, if it is the tenth, at most 1; not
			// overlong (a last byte of 0 after others).
			off++
			i, e := off, min(off+binary.MaxVarintLen64, len(p))
			for i < e && p[i] >= 0x80 {
				i++
			}
			if i == e || i-off == binary.MaxVarintLen64-1 && p[i] > 1 || i > off && p[i] == 0 {
				return 0
			}
			off = i + 1
		case codec.TypeString, codec.TypeBytes:
			var l uint64
			if off++; off < len(p) && p[off] < 0x80 {
				l, off = uint64(p[off]), off+1
			} else if l, off = codec.UvarintAt(p, off); off < 0 {
				return 0
			}
			if l > codec.MaxValueLen || l > uint64(len(p)-off) {
				return 0
			}
			off += int(l)
		case codec.TypeBool:
			if off+1 >= len(p) || p[off+1] > 1 {
				return 0
			}
			off += 2
		default:
			return 0
		}
		if mask[key>>6]>>(key&63)&1 != 0 {
			for j, x := range xs {
				if x == uint32(key) {
					// Where the value will be in the blob.
					vals[j] = uint64(2+nl+st-attrs)<<32 | uint64(2+nl+off-attrs)
				}
			}
		}
	}
	d.kpos = kpos
	n := 2 + nl + off - attrs
	if size += n; size > d.maxBlob {
		return 0
	}
	ref, b := d.st.Arena.Alloc(n)
	b[0] = byte(nl)
	copy(b[1:], name)
	b[1+nl] = byte(nattrs)
	a := b[2+nl:]
	copy(a, p[attrs:off])
	for _, k := range kpos {
		a[k>>8] = byte(k)
	}
	d.add(id, parent, kind, created, modified, ref, uint32(n))
	d.n++
	d.Size, d.Vals = size, vals
	return off
}

// add stores a decoded record (its blob already in the arena) in a new
// slot.
func (d *Decoder) add(id, parent uint64, kind uint32, created, modified, ref uint64, blen uint32) {
	st := d.st
	slot := st.AllocSlot()
	*st.At(slot) = layout.Rec{ID: id, Blob: ref, BLen: blen, Created: created, Modified: modified, Kind: kind}
	d.prevID = id
	d.Slot, d.Parent = slot, parent
}

// plainName reports whether name is a valid name of printable ASCII (the
// usual kind, checked here without ValidName's call).
func plainName(name []byte) bool {
	for _, c := range name {
		if c < 0x20 || c >= 0x7f || c == '/' {
			return false
		}
	}
	switch len(name) {
	case 1:
		return name[0] != '.'
	case 2:
		return name[0] != '.' || name[1] != '.'
	}
	return len(name) > 0 && len(name) <= layout.MaxNameLen
}

// keyTables makes the tables FastRecord reads a record's keys with: the
// tree key of each one-byte dictionary ref (0xff if the ref or the key
// needs more than a byte), the keys' places in name order, so that the
// order of a record's keys is checked by comparing numbers, and what each
// one-byte tree key adds to a node's size beyond its byte (see
// Decoder.Size).
func (d *Decoder) keyTables() {
	for r := range d.keyByte {
		d.keyByte[r] = 0xff
		if r < len(d.keys) && d.keys[r] < 0x80 {
			d.keyByte[r] = byte(d.keys[r])
		}
	}
	keys := d.t.Keys()
	for i := range min(len(keys), len(d.keyExtra)) {
		d.keyExtra[i] = uint16(codec.StrLen(keys[i]) - 1)
	}
	ids := make([]uint32, len(keys))
	for i := range ids {
		ids[i] = uint32(i)
	}
	slices.SortFunc(ids, func(a, b uint32) int { return strings.Compare(keys[a], keys[b]) })
	for r, i := range ids {
		if i < 0x80 {
			d.rank[i] = uint32(r)
		}
	}
	d.nkeys = len(d.keys)
}

// indexesOf returns the secondary index keys of a kind (all defined by
// the header, so fixed while records arrive) and the set of them below
// 0x80 as a bit mask.
func (d *Decoder) indexesOf(kind uint32) ([]uint32, *[2]uint64) {
	for int(kind) >= len(d.xs) {
		xs := d.t.IndexKeys(uint32(len(d.xs)))
		var mask [2]uint64
		for _, x := range xs {
			if x < 0x80 {
				mask[x>>6] |= 1 << (x & 63)
			}
		}
		d.xs = append(d.xs, xs)
		d.masks = append(d.masks, mask)
		if len(xs) > len(d.vals) {
			d.vals = make([]uint64, len(xs))
		}
	}
	return d.xs[kind], &d.masks[kind]
}

// ref reads a dictionary reference, defining a new entry when it is the
// next one.
func (d *Decoder) ref(r *codec.Reader, dict *[]uint32, kind bool) uint32 {
	n := r.Uvarint("dictionary ref")
	if r.Err != nil {
		return 0
	}
	if n < uint64(len(*dict)) {
		return (*dict)[n]
	}
	if n > uint64(len(*dict)) {
		r.Fail("dictionary ref %d beyond %d entries", n, len(*dict))
		return 0
	}
	name := r.Str("dictionary entry", layout.MaxNameLen)
	if r.Err != nil {
		return 0
	}
	// Index definitions in the header may have interned a name already;
	// what must not happen is the dictionary defining it twice.
	var i uint32
	if kind {
		if name != "" || len(*dict) != 0 {
			if err := d.t.ValidName(name); err != nil {
				r.Fail("kind: %s", Detail(err))
				return 0
			}
		}
		i = d.t.InternKind(name)
	} else {
		if err := d.t.ValidName(name); err != nil {
			r.Fail("attribute key: %s", Detail(err))
			return 0
		}
		i = d.t.InternKey(name)
	}
	if slices.Contains(*dict, i) {
		r.Fail("dictionary entry %q defined twice", name)
		return 0
	}
	*dict = append(*dict, i)
	return i
}

// Detail is the text of a decoding error inside an image. An image error
// wraps ErrCorrupt, not the record reader's ErrMalformed (which is about
// batches), so the cause is kept as text on purpose.
func Detail(err error) string {
	return strings.TrimPrefix(err.Error(), "catalog: ")
}
