package catalog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"

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
	ld := &loader{br: br}
	if err := ld.run(); err != nil {
		return nil, err
	}
	return ld.s, nil
}

type loader struct {
	br      *blockReader
	s       *state
	index   uint64
	count   uint64
	defs    [][2]string
	parents []uint64 // by slot
	prevID  uint64
	kinds   []uint32 // dictionary ref -> state kind
	keys    []uint32 // dictionary ref -> state key
	blob    []byte
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

func (ld *loader) records(p []byte) error {
	s := ld.s
	// Strings view the block: names are copied into the arena and
	// dictionary entries by interning.
	d := &decoder{data: p, view: true}
	for d.off < len(p) && d.err == nil {
		if uint64(s.nslots) >= ld.count {
			return ld.br.corrupt("more nodes than the header's %d", ld.count)
		}
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
		if d.err != nil {
			break
		}
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
		if d.err != nil {
			break
		}
		if len(b) > maxBlobBytes {
			d.fail("node %d: %d bytes of attributes", id, len(b))
			break
		}
		ld.blob = b
		slot := s.allocSlot()
		ref, n := s.arena.put(b)
		*s.at(slot) = rec{id: id, blob: ref, blen: n, created: created, modified: modified, kind: kind}
		s.setSlotOf(id, slot)
		if kind != 0 {
			s.kindSets[kind].Add(slot)
			s.secAdd(slot)
		}
		ld.parents = append(ld.parents, parent)
		ld.prevID = id
	}
	if d.err != nil {
		return ld.br.corrupt("%s", detail(d.err))
	}
	return nil
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

// link connects children to parents, checks that every node hangs from
// the root with unique sibling names, and builds the secondary indexes.
func (ld *loader) link() error {
	s := ld.s
	// Count the children of each node, give each list a region of the
	// right class, fill the lists, then sort them by name.
	counts := make([]uint32, s.nslots)
	for slot := uint32(1); slot < s.nslots; slot++ {
		ps, ok := s.slotOf(ld.parents[slot])
		if !ok {
			return ld.br.corrupt("node %d: parent %d does not exist", s.at(slot).id, ld.parents[slot])
		}
		s.at(slot).parent = ps
		counts[ps]++
	}
	ld.parents = nil
	for slot := uint32(0); slot < s.nslots; slot++ {
		if counts[slot] > 0 {
			s.at(slot).kids = s.kids.alloc(counts[slot])
		}
	}
	counts = nil
	for slot := uint32(1); slot < s.nslots; slot++ {
		r := s.kids.region(s.at(s.at(slot).parent).kids)
		r[2+r[0]] = slot
		r[0]++
	}
	cmp := func(a, b uint32) int { return bytes.Compare(s.name(a), s.name(b)) }
	for slot := uint32(0); slot < s.nslots; slot++ {
		k := s.kidsOf(slot)
		if !slices.IsSortedFunc(k, cmp) {
			slices.SortFunc(k, cmp)
		}
		for j := 1; j < len(k); j++ {
			if cmp(k[j-1], k[j]) == 0 {
				return ld.br.corrupt("two children of node %d named %q", s.at(slot).id, s.name(k[j]))
			}
		}
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
