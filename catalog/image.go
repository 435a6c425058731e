package catalog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"unsafe"

	"github.com/metatree/metatree/catalog/internal/idset"
)

// The image body, version 1:
//
//	body   := magic:"MTCATIMG" version:byte block*
//	block  := len:uvarint payload:[len]byte crc:uint32le   (CRC-32C of len's bytes and payload)
//	payload:= 'H' index nextID nodes:uvarint nindexes:uvarint (kind:str attr:str)*
//	        | 'N' record*                                   (up to ~64 KiB a block)
//	        | 'E' nodes:uvarint blocks:uvarint              (the last block)
//	record := idDelta:uvarint parentID:uvarint name:str kind:ref created:uvarint
//	          modifiedDelta:uvarint nattrs:uvarint (key:ref value)*
//	ref    := n:uvarint [str if n is the next dictionary entry]
//
// Nodes appear in increasing id order, the root first; attributes in
// increasing key order; kinds and keys are dictionary-coded in order of
// first use. The content determines the bytes, so replicas that applied the
// same entries write identical bodies. Load reads exactly up to the end
// block and no further, so the body can sit inside a larger file.

const (
	imageMagic      = "MTCATIMG"
	imageVersion    = 1
	imageBlockBytes = 64 << 10
	maxBlockBytes   = 8 << 20
)

// saveChunkIDs is how many ids Save handles per lock hold (a variable so
// that tests can force tiny chunks).
var saveChunkIDs uint64 = 2048

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type blockWriter struct {
	w       io.Writer
	out     []byte
	payload []byte
	blocks  int
}

func (bw *blockWriter) flush() error {
	if len(bw.payload) == 0 {
		return nil
	}
	bw.out = binary.AppendUvarint(bw.out[:0], uint64(len(bw.payload)))
	crc := crc32.Update(crc32.Checksum(bw.out, castagnoli), castagnoli, bw.payload)
	bw.out = append(bw.out, bw.payload...)
	bw.out = binary.LittleEndian.AppendUint32(bw.out, crc)
	bw.payload = bw.payload[:0]
	bw.blocks++
	if _, err := bw.w.Write(bw.out); err != nil {
		return fmt.Errorf("catalog: save: %w", err)
	}
	return nil
}

// Save writes the image body of the tree as of one index to w, streaming it
// in checksummed blocks of about 64 KiB; nothing is built in memory first.
// It reads like OfKind, a chunk at a time and never holding the lock while
// it writes, so Apply goes on meanwhile; what it writes is the tree at the
// index it started at. While it runs the tree keeps the before-images of the
// nodes Apply changes (see longread.go), so a writer that stalls for long
// under heavy apply traffic costs memory until Save returns. The bytes
// depend only on the content: replicas at the same index write identical
// bodies.
func (t *Tree) Save(w io.Writer) error {
	lr := t.beginLong()
	defer lr.end()
	return t.saveFrom(lr, w)
}

// saveFrom writes the image of the tree as of the long read lr.
func (t *Tree) saveFrom(lr *longRead, w io.Writer) error {
	s := lr.s

	t.mu.RLock()
	maxID, count, defs := lr.nextID-1, lr.count, lr.defs
	t.mu.RUnlock()
	nextID := lr.nextID
	slices.SortFunc(defs, func(a, b [2]string) int {
		if c := bytes.Compare([]byte(a[0]), []byte(b[0])); c != 0 {
			return c
		}
		return bytes.Compare([]byte(a[1]), []byte(b[1]))
	})

	if _, err := io.WriteString(w, imageMagic+string([]byte{imageVersion})); err != nil {
		return fmt.Errorf("catalog: save: %w", err)
	}
	bw := &blockWriter{w: w, payload: make([]byte, 0, imageBlockBytes+4096)}
	p := append(bw.payload, 'H')
	p = binary.AppendUvarint(p, lr.v)
	p = binary.AppendUvarint(p, nextID)
	p = binary.AppendUvarint(p, count)
	p = binary.AppendUvarint(p, uint64(len(defs)))
	for _, d := range defs {
		p = appendStr(p, d[0])
		p = appendStr(p, d[1])
	}
	bw.payload = p
	if err := bw.flush(); err != nil {
		return err
	}

	kindRef := map[uint32]uint64{}
	keyRef := map[uint32]uint64{}
	var written, prevID uint64
	bw.payload = append(bw.payload, 'N')
	for id := uint64(rootID); id <= maxID; {
		end := min(id+saveChunkIDs, maxID+1)
		t.mu.RLock()
		for ; id < end; id++ {
			if pg := id >> pageBits; (pg >= uint64(len(s.pages)) || s.pages[pg] == nil) && len(s.lr.gone) == 0 {
				id = min((pg+1)<<pageBits, end) - 1 // skip an empty page
				continue
			}
			_, r, ok := lr.slotOf(id)
			if !ok {
				continue
			}
			bw.payload = lr.appendRecord(bw.payload, &r, prevID, kindRef, keyRef)
			prevID = id
			written++
		}
		t.mu.RUnlock()
		if len(bw.payload) >= imageBlockBytes {
			if err := bw.flush(); err != nil {
				return err
			}
			bw.payload = append(bw.payload, 'N')
		}
	}
	if len(bw.payload) > 1 {
		if err := bw.flush(); err != nil {
			return err
		}
	}
	bw.payload = bw.payload[:0]
	if written != count {
		// An internal invariant: the id pages and the node count disagree.
		return fmt.Errorf("catalog: save: wrote %d nodes, tree has %d", written, count)
	}
	blocks := bw.blocks
	p = append(bw.payload, 'E')
	p = binary.AppendUvarint(p, count)
	p = binary.AppendUvarint(p, uint64(blocks))
	bw.payload = p
	return bw.flush()
}

func (lr *longRead) appendRecord(p []byte, r *rec, prevID uint64, kindRef, keyRef map[uint32]uint64) []byte {
	s := lr.s
	p = binary.AppendUvarint(p, r.id-prevID)
	var parentID uint64
	if r.id != rootID {
		pr := lr.recAt(r.parent)
		parentID = pr.id
	}
	p = binary.AppendUvarint(p, parentID)
	name, attrs := splitBlob(s.blob(r))
	p = binary.AppendUvarint(p, uint64(len(name)))
	p = append(p, name...)
	p = appendRef(p, kindRef, r.kind, s.kinds)
	p = binary.AppendUvarint(p, r.created)
	p = binary.AppendUvarint(p, r.modified-r.created)
	it := newAttrIter(attrs)
	p = binary.AppendUvarint(p, uint64(it.n))
	for {
		k, v, ok := it.next()
		if !ok {
			break
		}
		p = appendRef(p, keyRef, k, s.keys)
		p = append(p, v...)
	}
	return p
}

func appendRef(p []byte, refs map[uint32]uint64, i uint32, names []string) []byte {
	if ref, ok := refs[i]; ok {
		return binary.AppendUvarint(p, ref)
	}
	ref := uint64(len(refs))
	refs[i] = ref
	p = binary.AppendUvarint(p, ref)
	return appendStr(p, names[i])
}

// Load replaces the whole tree with the image body read from r. The new
// tree is built aside and swapped in at once (readers see the old tree or
// the new one); on any error the tree is unchanged. Truncated, corrupted or
// inconsistent input is an error wrapping ErrCorrupt that says where;
// an unknown format version is ErrUnknownVersion. Every watcher receives a
// final OpResync event (if its buffer has room) and is closed with
// ErrResync. Load reads exactly the bytes Save wrote.
func (t *Tree) Load(r io.Reader) error {
	s, err := readImage(r, true)
	if err != nil {
		return err
	}
	t.applyMu.Lock()
	defer t.applyMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.s = s
	t.resyncAll(s.index)
	return nil
}

// detail is the text of a decoding error inside an image. The image error
// wraps ErrCorrupt, not the record decoder's ErrMalformed (which is about
// batches), so the cause is kept as text on purpose.
func detail(err error) string {
	return strings.TrimPrefix(err.Error(), "catalog: ")
}

type blockReader struct {
	r      io.Reader
	off    int64 // bytes consumed
	blocks int
	buf    []byte
	verify bool
}

func (br *blockReader) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: block %d (byte %d): %s", ErrCorrupt, br.blocks, br.off, fmt.Sprintf(format, args...))
}

func (br *blockReader) readFull(b []byte, what string) error {
	n, err := io.ReadFull(br.r, b)
	br.off += int64(n)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return br.corrupt("truncated in %s", what)
	}
	if err != nil {
		return fmt.Errorf("catalog: load: block %d (byte %d): %w", br.blocks, br.off, err)
	}
	return nil
}

// next reads one block and returns its payload (valid until the next call).
func (br *blockReader) next() ([]byte, error) {
	var lenBytes [binary.MaxVarintLen64]byte
	n := 0
	for {
		if n == len(lenBytes) {
			return nil, br.corrupt("bad block length")
		}
		if err := br.readFull(lenBytes[n:n+1], "block length"); err != nil {
			return nil, err
		}
		n++
		if lenBytes[n-1] < 0x80 {
			break
		}
	}
	l, m := binary.Uvarint(lenBytes[:n])
	if m <= 0 || l == 0 || l > maxBlockBytes {
		return nil, br.corrupt("block length %d out of range", l)
	}
	if cap(br.buf) < int(l)+4 {
		br.buf = make([]byte, int(l)+4)
	}
	b := br.buf[:int(l)+4]
	if err := br.readFull(b, "block payload"); err != nil {
		return nil, err
	}
	payload := b[:l]
	want := binary.LittleEndian.Uint32(b[l:])
	if br.verify {
		got := crc32.Update(crc32.Checksum(lenBytes[:n], castagnoli), castagnoli, payload)
		if got != want {
			return nil, br.corrupt("checksum mismatch (got %08x, want %08x)", got, want)
		}
	}
	br.blocks++
	return payload, nil
}

// readImage builds a state from an image body. verify=false skips the
// checksums (for fuzzing the decoder behind them).
func readImage(r io.Reader, verify bool) (*state, error) {
	return readImageWith(r, verify, false)
}

// readImageWith is readImage; careful decodes every record with the
// careful decoder, for tests that check fastRecord against it.
func readImageWith(r io.Reader, verify, careful bool) (*state, error) {
	var head [len(imageMagic) + 1]byte
	if n, err := io.ReadFull(r, head[:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w: truncated header (%d bytes)", ErrCorrupt, n)
		}
		return nil, fmt.Errorf("catalog: load: %w", err)
	}
	if string(head[:len(imageMagic)]) != imageMagic {
		return nil, fmt.Errorf("%w: not a catalog image (magic %q)", ErrCorrupt, head[:len(imageMagic)])
	}
	if v := head[len(imageMagic)]; v != imageVersion {
		return nil, fmt.Errorf("%w: image version %d (this code reads %d)", ErrUnknownVersion, v, imageVersion)
	}
	br := &blockReader{r: r, off: int64(len(head)), verify: verify}
	ld := &loader{br: br, careful: careful}
	if err := ld.run(); err != nil {
		return nil, err
	}
	return ld.s, nil
}

type loader struct {
	br      *blockReader
	careful bool // never take the fast path (see readImageWith)
	s       *state
	index   uint64
	count   uint64
	defs    [][2]string
	prevID  uint64
	kinds   []uint32 // dictionary ref -> state kind
	keys    []uint32 // dictionary ref -> state key
	blob    []byte

	// late lists the nodes whose parent comes later in the image (a node
	// moved under a newer one): they are linked, and the tree checked for
	// cycles, once every node is in. Every other node's parent is linked
	// as it arrives.
	late []lateParent
	// unsorted lists the parents whose children did not all arrive in
	// increasing name order (with repeats).
	unsorted []uint32
	// The parent of the last node added (id and slot; id 0 for none), and
	// that node's name.
	lastParentID uint64
	lastParent   uint32
	lastName     []byte

	// By state kind: the kind's secondary indexes and their caches, and
	// the value ranges of the record being decoded, one per index.
	xs    [][]*secIndex
	pcs   [][]*postCache
	masks [][2]uint64
	vals  [][2]int

	// See keyTables; nkeys is len(keys) when they were made.
	keyByte [0x80]byte
	rank    [0x80]uint32
	nkeys   int
	kpos    []uint32 // scratch: offset<<8 | state key of the record's keys
}

type lateParent struct {
	slot   uint32
	parent uint64 // id
}

func (ld *loader) run() error {
	br := ld.br
	p, err := br.next()
	if err != nil {
		return err
	}
	d := &decoder{data: p}
	if len(p) == 0 || p[0] != 'H' {
		return br.corrupt("first block is not the header")
	}
	d.off = 1
	ld.index = d.uvarint("index")
	nextID := d.uvarint("next id")
	ld.count = d.uvarint("node count")
	ndefs := d.uvarint("index count")
	if d.err == nil && ndefs > uint64(len(p)) {
		d.fail("index count %d impossible", ndefs)
	}
	for i := 0; i < int(ndefs) && d.err == nil; i++ {
		k := d.str("index kind", MaxNameLen)
		a := d.str("index attr", MaxNameLen)
		ld.defs = append(ld.defs, [2]string{k, a})
	}
	if d.err == nil && d.off != len(p) {
		d.fail("%d trailing bytes in header", len(p)-d.off)
	}
	if d.err != nil {
		return br.corrupt("header: %s", detail(d.err))
	}
	if nextID <= rootID || ld.count == 0 || ld.count > nextID-1 {
		return br.corrupt("header: next id %d with %d nodes", nextID, ld.count)
	}
	s := &state{
		index:       ld.index,
		nextID:      nextID,
		kinds:       []string{""},
		kindIdx:     map[string]uint32{"": 0},
		kindSets:    []*idset.Set{nil},
		keyIdx:      map[string]uint32{},
		indexes:     map[[2]uint32]*secIndex{},
		kindIndexes: map[uint32][]*secIndex{},
	}
	s.lr.init()
	ld.s = s
	ld.keyTables()
	// The secondary indexes are filled as the records arrive.
	for _, def := range ld.defs {
		if err := ValidName(def[0]); err != nil {
			return br.corrupt("index kind: %s", detail(err))
		}
		if err := ValidName(def[1]); err != nil {
			return br.corrupt("index attribute: %s", detail(err))
		}
		k, key := s.internKind(def[0]), s.internKey(def[1])
		if s.indexes[[2]uint32{k, key}] != nil {
			return br.corrupt("index on (%q, %q) listed twice", def[0], def[1])
		}
		s.addIndex(&secIndex{kind: k, key: key, kindName: s.kinds[k], keyName: s.keys[key], post: map[string]*idset.Set{}})
	}
	for {
		p, err := br.next()
		if err != nil {
			return err
		}
		switch p[0] {
		case 'N':
			if err := ld.records(p[1:]); err != nil {
				return err
			}
		case 'E':
			d := &decoder{data: p, off: 1}
			n := d.uvarint("end node count")
			blocks := d.uvarint("end block count")
			if d.err == nil && d.off != len(p) {
				d.fail("%d trailing bytes in end block", len(p)-d.off)
			}
			if d.err != nil {
				return br.corrupt("end: %s", detail(d.err))
			}
			if n != ld.count || uint64(s.nslots) != n || blocks != uint64(br.blocks-1) {
				return br.corrupt("end: %d nodes in %d blocks, read %d nodes in %d blocks (header says %d nodes)", n, blocks, s.nslots, br.blocks-1, ld.count)
			}
			return ld.link()
		default:
			return br.corrupt("unknown block type %q", p[0])
		}
	}
}

// records decodes an 'N' block. Nearly every record has one shape (short
// name, dictionary refs already defined, at most 127 attributes), and
// fastRecord decodes that shape with plain offsets at a fraction of the
// cost. Anything else, and every malformed record, goes through record, the
// careful decoder, so that each error and its byte offset are the same
// whichever path met the record first.
func (ld *loader) records(p []byte) error {
	s := ld.s
	// Strings view the block: names are copied into the arena and
	// dictionary entries by interning.
	d := &decoder{data: p, view: true}
	for off := 0; off < len(p); {
		if uint64(s.nslots) >= ld.count {
			return ld.br.corrupt("more nodes than the header's %d", ld.count)
		}
		var next int
		var err error
		if !ld.careful {
			next, err = ld.fastRecord(p, off)
			if err != nil {
				return err
			}
		}
		if next == 0 {
			d.off = off
			if next, err = ld.record(d); err != nil {
				return err
			}
		}
		off = next
	}
	return nil
}

// record decodes the record at d.off carefully and returns the offset
// after it.
func (ld *loader) record(d *decoder) (int, error) {
	s := ld.s
	p := d.data
	id := ld.prevID + d.uvarint("id")
	if d.err == nil && (id <= ld.prevID || id >= s.nextID) {
		d.fail("id %d out of order or beyond next id %d", id, s.nextID)
	}
	parent := d.uvarint("parent")
	name := d.str("name", MaxNameLen)
	kind := ld.ref(d, &ld.kinds, true)
	created := d.uvarint("created")
	modified := created + d.uvarint("modified")
	nattrs := d.uvarint("attribute count")
	if d.err == nil && nattrs > uint64(len(p)-d.off)/3 {
		d.fail("attribute count %d impossible", nattrs)
	}
	if d.err == nil {
		if id == rootID {
			if parent != 0 || name != "" || kind != 0 {
				d.fail("root record has parent %d, name %q, kind %q", parent, name, s.kinds[kind])
			}
		} else {
			if parent == 0 || name == "" || kind == 0 {
				d.fail("node %d has parent %d, name %q, kind %q", id, parent, name, s.kinds[kind])
			} else if err := ValidName(name); err != nil {
				d.fail("node %d: %s", id, detail(err))
			}
		}
		if id != rootID && s.nslots == 0 {
			d.fail("first node is %d, not the root", id)
		}
	}
	if d.err == nil && (modified < created || modified > ld.index) {
		d.fail("node %d created %d modified %d at index %d", id, created, modified, ld.index)
	}
	// The blob is built straight from the record: values are copied
	// in their encoded form, keys mapped from the image's dictionary.
	b := binary.AppendUvarint(ld.blob[:0], uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, nattrs)
	prevKey := ""
	for i := 0; i < int(nattrs) && d.err == nil; i++ {
		key := ld.ref(d, &ld.keys, false)
		st := d.off
		d.value("attribute value")
		if d.err != nil {
			break
		}
		kn := s.keys[key]
		if i > 0 && kn <= prevKey {
			d.fail("node %d: attribute keys out of order at %q", id, kn)
			break
		}
		prevKey = kn
		b = binary.AppendUvarint(b, uint64(key))
		b = append(b, p[st:d.off]...)
	}
	if d.err == nil && len(b) > maxBlobBytes {
		d.fail("node %d: %d bytes of attributes", id, len(b))
	}
	ld.blob = b
	if d.err != nil {
		return 0, ld.br.corrupt("%s", detail(d.err))
	}
	ref, n := s.arena.put(b)
	nm, _ := splitBlob(s.arena.get(ref, n))
	slot, err := ld.add(id, parent, kind, created, modified, ref, n, nm)
	if err != nil {
		return 0, err
	}
	if kind != 0 {
		s.secAdd(slot)
	}
	return d.off, nil
}

// fastRecord decodes the record at p[off:] and returns the offset after
// it, if the record has the common shape and is valid; otherwise it
// returns 0 and changes nothing, and the caller decodes the record with
// record. It accepts exactly what record accepts (for the same state and
// bytes, with the same result): lengths and refs that are not one byte,
// new dictionary entries and the root are simply left to record.
func (ld *loader) fastRecord(p []byte, off int) (int, error) {
	s := ld.s
	// The varints are read inline when they are one byte (most are).
	var delta, parent, created, mdelta uint64
	if off < len(p) && p[off] < 0x80 {
		delta, off = uint64(p[off]), off+1
	} else if delta, off = uvarintSlow(p, off); off < 0 {
		return 0, nil
	}
	if off < len(p) && p[off] < 0x80 {
		parent, off = uint64(p[off]), off+1
	} else if parent, off = uvarintSlow(p, off); off < 0 {
		return 0, nil
	}
	id := ld.prevID + delta
	if id <= ld.prevID || id >= s.nextID || id == rootID || s.nslots == 0 || parent == 0 || off >= len(p) {
		return 0, nil
	}
	nl := int(p[off])
	off++
	if nl == 0 || nl >= 0x80 || nl >= len(p)-off {
		return 0, nil
	}
	name := p[off : off+nl]
	off += nl
	kr := p[off]
	off++
	if kr >= 0x80 || int(kr) >= len(ld.kinds) {
		return 0, nil
	}
	kind := ld.kinds[kr]
	if off < len(p) && p[off] < 0x80 {
		created, off = uint64(p[off]), off+1
	} else if created, off = uvarintSlow(p, off); off < 0 {
		return 0, nil
	}
	if off < len(p) && p[off] < 0x80 {
		mdelta, off = uint64(p[off]), off+1
	} else if mdelta, off = uvarintSlow(p, off); off < 0 {
		return 0, nil
	}
	if off >= len(p) || kind == 0 {
		return 0, nil
	}
	modified := created + mdelta
	if modified < created || modified > ld.index {
		return 0, nil
	}
	nattrs := int(p[off])
	off++
	if nattrs >= 0x80 || nattrs > (len(p)-off)/3 {
		return 0, nil
	}
	if !plainName(name) && ValidName(unsafe.String(&name[0], nl)) != nil {
		return 0, nil
	}
	xs, mask := ld.indexesOf(kind)
	vals := ld.vals[:len(xs)]
	clear(vals)
	if ld.nkeys != len(ld.keys) {
		ld.keyTables()
	}
	// The attributes are checked first; the blob is then the name and
	// the attribute bytes as they are, with each key's dictionary ref
	// replaced by the state key (both one byte here).
	kpos := ld.kpos[:0]
	attrs := off
	prevRank := -1
	for range nattrs {
		if off >= len(p) {
			return 0, nil
		}
		r := p[off]
		if r >= 0x80 {
			return 0, nil
		}
		key := ld.keyByte[r]
		if key >= 0x80 {
			return 0, nil
		}
		if kr := int(ld.rank[key]); kr > prevRank {
			prevRank = kr
		} else {
			return 0, nil
		}
		kpos = append(kpos, uint32(off-attrs)<<8|uint32(key))
		off++
		st := off
		if off >= len(p) {
			return 0, nil
		}
		switch ValueType(p[off]) {
		case TypeInt:
			// Skip what binary.Varint accepts: up to 10 bytes, the last
			// below 0x80 and, if it is the tenth, at most 1.
			off++
			i, e := off, min(off+binary.MaxVarintLen64, len(p))
			for i < e && p[i] >= 0x80 {
				i++
			}
			if i == e || i-off == binary.MaxVarintLen64-1 && p[i] > 1 {
				return 0, nil
			}
			off = i + 1
		case TypeString, TypeBytes:
			var l uint64
			if off++; off < len(p) && p[off] < 0x80 {
				l, off = uint64(p[off]), off+1
			} else if l, off = uvarintSlow(p, off); off < 0 {
				return 0, nil
			}
			if l > MaxValueLen || l > uint64(len(p)-off) {
				return 0, nil
			}
			off += int(l)
		case TypeBool:
			if off+1 >= len(p) || p[off+1] > 1 {
				return 0, nil
			}
			off += 2
		default:
			return 0, nil
		}
		if mask[key>>6]>>(key&63)&1 != 0 {
			for j, x := range xs {
				if x.key == uint32(key) {
					vals[j] = [2]int{st, off}
				}
			}
		}
	}
	ld.kpos = kpos
	n := 2 + nl + off - attrs
	if n > maxBlobBytes {
		return 0, nil
	}
	ref, b := s.arena.alloc(n)
	b[0] = byte(nl)
	copy(b[1:], name)
	b[1+nl] = byte(nattrs)
	a := b[2+nl:]
	copy(a, p[attrs:off])
	for _, k := range kpos {
		a[k>>8] = byte(k)
	}
	slot, err := ld.add(id, parent, kind, created, modified, ref, uint32(n), b[1:1+nl])
	if err != nil {
		return 0, err
	}
	for j, v := range vals {
		if v[1] != 0 {
			ld.pcs[kind][j].add(xs[j], p[v[0]:v[1]], slot)
		}
	}
	return off, nil
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
	return len(name) > 0 && len(name) <= MaxNameLen
}

// keyTables makes the tables fastRecord reads a record's keys with: the
// state key of each one-byte dictionary ref (0xff if the ref or the key
// needs more than a byte), and the keys' places in name order, so that the
// order of a record's keys is checked by comparing numbers.
func (ld *loader) keyTables() {
	for r := range ld.keyByte {
		ld.keyByte[r] = 0xff
		if r < len(ld.keys) && ld.keys[r] < 0x80 {
			ld.keyByte[r] = byte(ld.keys[r])
		}
	}
	keys := ld.s.keys
	ids := make([]uint32, len(keys))
	for i := range ids {
		ids[i] = uint32(i)
	}
	slices.SortFunc(ids, func(a, b uint32) int { return strings.Compare(keys[a], keys[b]) })
	for r, i := range ids {
		if i < 0x80 {
			ld.rank[i] = uint32(r)
		}
	}
	ld.nkeys = len(ld.keys)
}

// uvarintSlow is binary.Uvarint of p[off:]: the value and the offset
// after it, or -1 when there is no valid varint there.
func uvarintSlow(p []byte, off int) (uint64, int) {
	if uint(off) >= uint(len(p)) {
		return 0, -1
	}
	v, n := binary.Uvarint(p[off:])
	if n <= 0 {
		return 0, -1
	}
	return v, off + n
}

// add stores a decoded record (its blob already in the arena, name viewing
// it) in a new slot, and appends it to its parent's children if the parent
// came first (see loader.late); it returns the slot.
func (ld *loader) add(id, parent uint64, kind uint32, created, modified, ref uint64, blen uint32, name []byte) (uint32, error) {
	s := ld.s
	slot := s.allocSlot()
	r := s.at(slot)
	*r = rec{id: id, blob: ref, blen: blen, created: created, modified: modified, kind: kind}
	s.setSlotOf(id, slot)
	ld.prevID = id
	if id == rootID {
		return slot, nil
	}
	s.kindSets[kind].Add(slot)
	if parent >= id {
		ld.late = append(ld.late, lateParent{slot, parent})
		return slot, nil
	}
	// Siblings tend to come together: the last parent is remembered, with
	// the name of the child last added to it.
	ps := ld.lastParent
	if parent != ld.lastParentID {
		var ok bool
		if ps, ok = s.slotOf(parent); !ok {
			return 0, ld.br.corrupt("node %d: parent %d does not exist", id, parent)
		}
	}
	r.parent = ps
	pr := s.at(ps)
	if pr.kids == 0 {
		pr.kids = s.kids.insert(0, 0, slot)
	} else {
		// Children mostly arrive in name order: one comparison with the
		// last one keeps the list sorted; link sorts the others.
		k := s.kids.region(pr.kids)
		n := k[0]
		last := ld.lastName
		if ps != ld.lastParent {
			last = s.name(k[1+n])
		}
		if bytes.Compare(last, name) >= 0 {
			if u := len(ld.unsorted); u == 0 || ld.unsorted[u-1] != ps {
				ld.unsorted = append(ld.unsorted, ps)
			}
		}
		if n < k[1] {
			k[2+n] = slot
			k[0] = n + 1
		} else {
			pr.kids = s.kids.insert(pr.kids, int(n), slot)
		}
	}
	ld.lastParentID, ld.lastParent, ld.lastName = parent, ps, name
	return slot, nil
}

// indexesOf returns the secondary indexes of a kind (all defined by the
// header, so fixed while records arrive) and the set of their keys below
// 0x80 as a bit mask.
func (ld *loader) indexesOf(kind uint32) ([]*secIndex, *[2]uint64) {
	for int(kind) >= len(ld.xs) {
		xs := ld.s.kindIndexes[uint32(len(ld.xs))]
		pcs := make([]*postCache, len(xs))
		var mask [2]uint64
		for i, x := range xs {
			pcs[i] = new(postCache)
			if x.key < 0x80 {
				mask[x.key>>6] |= 1 << (x.key & 63)
			}
		}
		ld.xs = append(ld.xs, xs)
		ld.pcs = append(ld.pcs, pcs)
		ld.masks = append(ld.masks, mask)
		if len(xs) > len(ld.vals) {
			ld.vals = make([][2]int, len(xs))
		}
	}
	return ld.xs[kind], &ld.masks[kind]
}

// postCache is a direct-mapped cache in front of one index's postings map
// for values of up to 8 bytes (ints, short strings): a loaded index sees
// the same few values over and over, and hashing the string for the map
// costs more than the rest of adding the node.
type postCache [1024]struct {
	v   uint64 // the value's bytes, little-endian
	n   int    // its length; 0: empty entry
	set *idset.Set
}

func (c *postCache) add(x *secIndex, val []byte, slot uint32) {
	if len(val) > 8 {
		x.add(val, slot)
		return
	}
	var v uint64
	for i, b := range val {
		v |= uint64(b) << (8 * i)
	}
	e := &c[(v*0x9e3779b97f4a7c15+uint64(len(val)))>>54]
	if e.n != len(val) || e.v != v {
		p := x.post[string(val)]
		if p == nil {
			p = new(idset.Set)
			x.post[string(val)] = p
		}
		e.v, e.n, e.set = v, len(val), p
	}
	e.set.Add(slot)
}

// ref reads a dictionary reference, defining a new entry when it is the
// next one.
func (ld *loader) ref(d *decoder, dict *[]uint32, kind bool) uint32 {
	n := d.uvarint("dictionary ref")
	if d.err != nil {
		return 0
	}
	if n < uint64(len(*dict)) {
		return (*dict)[n]
	}
	if n > uint64(len(*dict)) {
		d.fail("dictionary ref %d beyond %d entries", n, len(*dict))
		return 0
	}
	name := d.str("dictionary entry", MaxNameLen)
	if d.err != nil {
		return 0
	}
	// Index definitions in the header may have interned a name already;
	// what must not happen is the dictionary defining it twice.
	var i uint32
	if kind {
		if name != "" || len(*dict) != 0 {
			if err := ValidName(name); err != nil {
				d.fail("kind: %s", detail(err))
				return 0
			}
		}
		i = ld.s.internKind(name)
	} else {
		if err := ValidName(name); err != nil {
			d.fail("attribute key: %s", detail(err))
			return 0
		}
		i = ld.s.internKey(name)
	}
	if slices.Contains(*dict, i) {
		d.fail("dictionary entry %q defined twice", name)
		return 0
	}
	*dict = append(*dict, i)
	return i
}

// link links the nodes whose parent came later, sorts the child lists
// that did not arrive in name order, and checks that sibling names are
// unique and that every node hangs from the root.
func (ld *loader) link() error {
	s := ld.s
	for _, l := range ld.late {
		ps, ok := s.slotOf(l.parent)
		if !ok {
			return ld.br.corrupt("node %d: parent %d does not exist", s.at(l.slot).id, l.parent)
		}
		s.at(l.slot).parent = ps
		pr := s.at(ps)
		pr.kids = s.kids.insert(pr.kids, len(s.kids.list(pr.kids)), l.slot)
		ld.unsorted = append(ld.unsorted, ps)
	}
	slices.Sort(ld.unsorted)
	cmp := func(a, b uint32) int { return bytes.Compare(s.name(a), s.name(b)) }
	for _, slot := range slices.Compact(ld.unsorted) {
		k := s.kidsOf(slot)
		if strictlySorted(s, k) {
			continue
		}
		slices.SortFunc(k, cmp)
		for j := 1; j < len(k); j++ {
			if cmp(k[j-1], k[j]) == 0 {
				return ld.br.corrupt("two children of node %d named %q", s.at(slot).id, s.name(k[j]))
			}
		}
	}
	if len(ld.late) == 0 {
		// Every parent came before its children, starting from the root
		// (the first record): all are reachable, no cycle is possible.
		return nil
	}
	// Every node must be reachable from the root (no cycles).
	seen := 1
	stack := []uint32{rootSlot}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		kids := s.kidsOf(n)
		seen += len(kids)
		stack = append(stack, kids...)
	}
	if seen != int(s.nslots) {
		return ld.br.corrupt("%d of %d nodes are not reachable from the root (a parent cycle)", int(s.nslots)-seen, s.nslots)
	}
	return nil
}

// strictlySorted reports whether the names of k increase strictly (sorted,
// no two equal): the usual case, settled in one comparison per child.
func strictlySorted(s *state, k []uint32) bool {
	prev := s.name(k[0])
	for _, c := range k[1:] {
		cur := s.name(c)
		if bytes.Compare(prev, cur) >= 0 {
			return false
		}
		prev = cur
	}
	return true
}
