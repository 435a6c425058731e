package catalog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"strings"
	"unsafe"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/idset"
	"github.com/metatree/metatree/catalog/internal/layout"
	"github.com/metatree/metatree/internal/operr"
)

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
		return nil, operr.Errorf("catalog: load: %w", err)
	}
	if string(head[:len(imageMagic)]) != imageMagic {
		return nil, fmt.Errorf("%w: not a catalog image (magic %q)", ErrCorrupt, head[:len(imageMagic)])
	}
	v := head[len(imageMagic)]
	if v < imageV1 || v > imageVersion {
		return nil, fmt.Errorf("%w: image version %d (this code reads %d to %d)", ErrUnknownVersion, v, imageV1, imageVersion)
	}
	br := &blockReader{r: r, off: int64(len(head)), verify: verify}
	ld := &loader{br: br, careful: careful, version: v}
	if err := ld.run(); err != nil {
		return nil, err
	}
	ld.s.digest, ld.s.digestFormat = ld.s.computeDigest(NewestDigest), NewestDigest
	return ld.s, nil
}

type loader struct {
	version byte // of the image
	// The ownerships of 'O' blocks, added once the nodes are linked.
	owned     []imageLink
	prevOwned uint64
	br        *blockReader
	careful   bool // never take the fast path (see readImageWith)
	s         *state
	index     uint64
	count     uint64
	defs      [][2]string
	prevID    uint64
	kinds     []uint32 // dictionary ref -> state kind
	keys      []uint32 // dictionary ref -> state key
	blob      []byte

	// The records of each block are handed to the linker (see linker).
	lk  *linker
	cur *linkBatch
	// By state kind: its secondary indexes and the set of their keys
	// below 0x80 as a bit mask; scratch for where the record's indexed
	// values are (see linkBatch.vals).
	xs    [][]*secIndex
	masks [][2]uint64
	vals  []uint64
	// Lengths of the state's outer slices the linker has views of.
	sentSlab, sentChunks, sentKinds int

	// See keyTables; nkeys is len(keys) when they were made.
	keyByte  [0x80]byte
	rank     [0x80]uint32
	keyExtra [0x80]uint16
	nkeys    int
	kpos     []uint32 // scratch: offset<<8 | state key of the record's keys
}

type lateParent struct {
	slot   uint32
	parent uint64 // id
}

// run reads the image, then links the tree. The linker runs beside the
// decoder; whatever happens it has stopped when run returns, and its error,
// about a record decoded before anything the decoder failed on, comes
// first.
func (ld *loader) run() error {
	err := ld.decode()
	if ld.lk != nil {
		if lerr := ld.stopLinker(); lerr != nil {
			return lerr
		}
	}
	if err != nil {
		return err
	}
	if err := ld.link(); err != nil {
		return err
	}
	return ld.linkOwned()
}

// decode reads the header and the blocks of records up to the end block.
func (ld *loader) decode() error {
	br := ld.br
	p, err := br.next()
	if err != nil {
		return err
	}
	d := &decoder{Reader: codec.Reader{Data: p}}
	if len(p) == 0 || p[0] != 'H' {
		return br.corrupt("first block is not the header")
	}
	d.Off = 1
	ld.index = d.Uvarint("index")
	nextID := d.Uvarint("next id")
	ld.count = d.Uvarint("node count")
	ndefs := d.Uvarint("index count")
	if d.Err == nil && ndefs > uint64(len(p)) {
		d.Fail("index count %d impossible", ndefs)
	}
	for i := 0; i < int(ndefs) && d.Err == nil; i++ {
		k := d.Str("index kind", MaxNameLen)
		a := d.Str("index attr", MaxNameLen)
		ld.defs = append(ld.defs, [2]string{k, a})
	}
	if d.Err == nil && d.Off != len(p) {
		d.Fail("%d trailing bytes in header", len(p)-d.Off)
	}
	if d.Err != nil {
		return br.corrupt("header: %s", detail(d.Err))
	}
	if nextID <= layout.RootID || ld.count == 0 || ld.count > nextID-1 {
		return br.corrupt("header: next id %d with %d nodes", nextID, ld.count)
	}
	if nextID > layout.IDLimit {
		// No tree hands out such ids (create stops at the limit), and a
		// tree that did could not save or grow (see layout.IDLimit).
		return br.corrupt("header: next id %d beyond the ids a tree hands out (below %d)", nextID, uint64(layout.IDLimit))
	}
	s := emptyState(ld.index, nextID)
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
	ld.startLinker()
	for {
		p, err := br.next()
		if err != nil {
			return err
		}
		switch p[0] {
		case 'N':
			if len(ld.owned) > 0 {
				return br.corrupt("nodes after the ownerships")
			}
			if err := ld.records(p[1:]); err != nil {
				return err
			}
		case 'O':
			if ld.version < imageVersion || len(p) == 1 {
				return br.corrupt("ownerships in a version %d image, or none in the block", ld.version)
			}
			if err := ld.links(p[1:]); err != nil {
				return err
			}
		case 'E':
			d := &decoder{Reader: codec.Reader{Data: p, Off: 1}}
			n := d.Uvarint("end node count")
			blocks := d.Uvarint("end block count")
			if d.Err == nil && d.Off != len(p) {
				d.Fail("%d trailing bytes in end block", len(p)-d.Off)
			}
			if d.Err != nil {
				return br.corrupt("end: %s", detail(d.Err))
			}
			if ld.version >= imageVersion && len(ld.owned) == 0 {
				// Save writes version 1 when nothing is owned.
				return br.corrupt("a version %d image without ownerships", ld.version)
			}
			if n != ld.count || uint64(s.NSlots) != n || blocks != uint64(br.blocks-1) {
				return br.corrupt("end: %d nodes in %d blocks, read %d nodes in %d blocks (header says %d nodes)", n, blocks, s.NSlots, br.blocks-1, ld.count)
			}
			return nil
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
	d := &decoder{Reader: codec.Reader{Data: p, View: true}}
	for off := 0; off < len(p); {
		if uint64(s.NSlots) >= ld.count {
			return ld.br.corrupt("more nodes than the header's %d", ld.count)
		}
		next := 0
		if !ld.careful {
			next = ld.fastRecord(p, off)
		}
		if next == 0 {
			d.Off = off
			var err error
			if next, err = ld.record(d); err != nil {
				return err
			}
		}
		off = next
	}
	ld.handOff()
	return nil
}

// record decodes the record at d.off carefully and returns the offset
// after it.
func (ld *loader) record(d *decoder) (int, error) {
	s := ld.s
	p := d.Data
	id := ld.prevID + d.Uvarint("id")
	if d.Err == nil && (id <= ld.prevID || id >= s.nextID) {
		d.Fail("id %d out of order or beyond next id %d", id, s.nextID)
	}
	parent := d.Uvarint("parent")
	name := d.Str("name", MaxNameLen)
	kind := ld.ref(d, &ld.kinds, true)
	created := d.Uvarint("created")
	modified := created + d.Uvarint("modified")
	nattrs := d.Uvarint("attribute count")
	if d.Err == nil && nattrs > uint64(len(p)-d.Off)/3 {
		d.Fail("attribute count %d impossible", nattrs)
	}
	if d.Err == nil {
		if id == layout.RootID {
			if parent != 0 || name != "" || kind != 0 {
				d.Fail("root record has parent %d, name %q, kind %q", parent, name, s.kinds[kind])
			}
		} else {
			if parent == 0 || name == "" || kind == 0 {
				d.Fail("node %d has parent %d, name %q, kind %q", id, parent, name, s.kinds[kind])
			} else if err := ValidName(name); err != nil {
				d.Fail("node %d: %s", id, detail(err))
			}
		}
		if id != layout.RootID && s.NSlots == 0 {
			d.Fail("first node is %d, not the root", id)
		}
	}
	if d.Err == nil && (modified < created || modified > ld.index) {
		d.Fail("node %d created %d modified %d at index %d", id, created, modified, ld.index)
	}
	// The blob is built straight from the record: values are copied
	// in their encoded form, keys mapped from the image's dictionary.
	b := binary.AppendUvarint(ld.blob[:0], uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, nattrs)
	size := 0 // what the keys add to len(b) for the node's size
	prevKey := ""
	for i := 0; i < int(nattrs) && d.Err == nil; i++ {
		key := ld.ref(d, &ld.keys, false)
		st := d.Off
		d.value("attribute value")
		if d.Err != nil {
			break
		}
		kn := s.keys[key]
		if i > 0 && kn <= prevKey {
			d.Fail("node %d: attribute keys out of order at %q", id, kn)
			break
		}
		prevKey = kn
		b = binary.AppendUvarint(b, uint64(key))
		size += keyCost(kn) - codec.UvarintLen(uint64(key))
		b = append(b, p[st:d.Off]...)
	}
	size += len(b)
	if d.Err == nil && size > maxBlobBytes {
		d.Fail("node %d: name and attributes of %d bytes (at most %d)", id, size, maxBlobBytes)
	}
	ld.blob = b
	if d.Err != nil {
		return 0, ld.br.corrupt("%s", detail(d.Err))
	}
	ref, n := s.Arena.Put(b)
	s.size += int64(size)
	ld.add(id, parent, kind, created, modified, ref, n)
	xs, _ := ld.indexesOf(kind)
	for range xs {
		ld.cur.vals = append(ld.cur.vals, findValue)
	}
	return d.Off, nil
}

// fastRecord decodes the record at p[off:] and returns the offset after
// it, if the record has the common shape and is valid; otherwise it
// returns 0 and changes nothing, and the caller decodes the record with
// record. It accepts exactly what record accepts (for the same state and
// bytes, with the same result): lengths and refs that are not one byte,
// new dictionary entries and the root are simply left to record.
func (ld *loader) fastRecord(p []byte, off int) int {
	s := ld.s
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
	id := ld.prevID + delta
	if id <= ld.prevID || id >= s.nextID || id == layout.RootID || s.NSlots == 0 || parent == 0 || off >= len(p) {
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
	if kr >= 0x80 || int(kr) >= len(ld.kinds) {
		return 0
	}
	kind := ld.kinds[kr]
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
	if modified < created || modified > ld.index {
		return 0
	}
	nattrs := int(p[off])
	off++
	if nattrs >= 0x80 || nattrs > (len(p)-off)/3 {
		return 0
	}
	if !plainName(name) && ValidName(unsafe.String(&name[0], nl)) != nil {
		return 0
	}
	if ld.nkeys != len(ld.keys) {
		ld.keyTables()
	}
	xs, mask := ld.indexesOf(kind)
	vals := ld.vals[:len(xs)]
	clear(vals)
	// The attributes are checked first; the blob is then the name and
	// the attribute bytes as they are, with each key's dictionary ref
	// replaced by the state key (both one byte here).
	kpos := ld.kpos[:0]
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
		key := ld.keyByte[r]
		if key >= 0x80 {
			return 0
		}
		if kr := int(ld.rank[key]); kr > prevRank {
			prevRank = kr
		} else {
			return 0
		}
		kpos = append(kpos, uint32(off-attrs)<<8|uint32(key))
		size += int(ld.keyExtra[key])
		off++
		st := off
		if off >= len(p) {
			return 0
		}
		switch ValueType(p[off]) {
		case TypeInt:
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
		case TypeString, TypeBytes:
			var l uint64
			if off++; off < len(p) && p[off] < 0x80 {
				l, off = uint64(p[off]), off+1
			} else if l, off = codec.UvarintAt(p, off); off < 0 {
				return 0
			}
			if l > MaxValueLen || l > uint64(len(p)-off) {
				return 0
			}
			off += int(l)
		case TypeBool:
			if off+1 >= len(p) || p[off+1] > 1 {
				return 0
			}
			off += 2
		default:
			return 0
		}
		if mask[key>>6]>>(key&63)&1 != 0 {
			for j, x := range xs {
				if x.key == uint32(key) {
					// Where the value will be in the blob.
					vals[j] = uint64(2+nl+st-attrs)<<32 | uint64(2+nl+off-attrs)
				}
			}
		}
	}
	ld.kpos = kpos
	n := 2 + nl + off - attrs
	if size += n; size > maxBlobBytes {
		return 0
	}
	ref, b := s.Arena.Alloc(n)
	s.size += int64(size)
	b[0] = byte(nl)
	copy(b[1:], name)
	b[1+nl] = byte(nattrs)
	a := b[2+nl:]
	copy(a, p[attrs:off])
	for _, k := range kpos {
		a[k>>8] = byte(k)
	}
	ld.add(id, parent, kind, created, modified, ref, uint32(n))
	ld.cur.vals = append(ld.cur.vals, vals...)
	return off
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
// needs more than a byte), the keys' places in name order, so that the
// order of a record's keys is checked by comparing numbers, and what each
// one-byte state key adds to a node's size beyond its byte (see nodeSize).
func (ld *loader) keyTables() {
	for r := range ld.keyByte {
		ld.keyByte[r] = 0xff
		if r < len(ld.keys) && ld.keys[r] < 0x80 {
			ld.keyByte[r] = byte(ld.keys[r])
		}
	}
	keys := ld.s.keys
	for i := range min(len(keys), len(ld.keyExtra)) {
		ld.keyExtra[i] = uint16(keyCost(keys[i]) - 1)
	}
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

// add stores a decoded record (its blob already in the arena) in a new
// slot; the linker does the rest.
func (ld *loader) add(id, parent uint64, kind uint32, created, modified, ref uint64, blen uint32) {
	s := ld.s
	slot := s.AllocSlot()
	*s.At(slot) = layout.Rec{ID: id, Blob: ref, BLen: blen, Created: created, Modified: modified, Kind: kind}
	ld.prevID = id
	ld.cur.parents = append(ld.cur.parents, parent)
}

// The linker. Load decodes records on the caller's goroutine and, block by
// block, hands the new slots to a second goroutine that indexes ids, links
// each node to its parent and adds it to its kind set and secondary
// indexes: the two halves of the work take about as long, and a restore or
// a start-up is waiting for the load. The goroutine lives only inside
// Load, which always stops it before returning (see loader.run).
//
// What each side touches while both run: the decoder appends slots, blobs
// and interned names; the linker writes the id pages, the child lists, the
// kind sets and postings, and the parent and kids fields of slots already
// handed over, which the decoder never touches again. The linker reads
// the state's slab, arena chunks and kind sets through copies of their
// outer slices (the decoder appends to those) made at each hand-over, and
// a blob once written is never written again.
type linker struct {
	s        *state
	count    uint64 // the header's node count
	slab     []*[layout.SlabSize]layout.Rec
	chunks   [][]byte
	kindSets []*idset.Set

	todo chan *linkBatch
	free chan *linkBatch // used batches, for reuse
	done chan struct{}   // closed when the goroutine has returned
	err  error           // the first error; read after done

	// late lists the nodes whose parent comes later in the image (a node
	// moved under a newer one): link links them, and checks the tree for
	// cycles, once every node is in. Every other node's parent is linked
	// as it arrives.
	late []lateParent
	// unsorted lists the parents whose children did not all arrive in
	// increasing name order (with repeats).
	unsorted []uint32
	// The parent of the last node linked (id and slot; id 0 for none),
	// and that node's name.
	lastParentID uint64
	lastParent   uint32
	lastName     []byte
	// chain is the path of the node last linked, each node with its sum
	// of path index terms: an image lists a parent's children together
	// and mostly right after the parent, so the next node's parent is
	// nearly always on it.
	chain []chainLink

	// By state kind: the kind's secondary indexes and their caches.
	xs  [][]*secIndex
	pcs [][]*postCache
}

type chainLink struct {
	slot  uint32
	depth int
	sum   uint64
}

// parentSum returns the sum of the path index terms of ps's path and its
// depth (see linker.chain); ok is false if ps hangs from a node linked
// late.
func (lk *linker) parentSum(ps uint32) (sum uint64, depth int, ok bool) {
	c := lk.chain
	for len(c) > 0 && c[len(c)-1].slot != ps {
		c = c[:len(c)-1]
	}
	if len(c) > 0 {
		lk.chain = c
		l := c[len(c)-1]
		return l.sum, l.depth, true
	}
	sum, depth, ok = lk.s.Paths.PathSum(lk, ps)
	if ok {
		lk.chain = append(c, chainLink{ps, depth, sum})
	}
	return sum, depth, ok
}

// findValue in linkBatch.vals: the linker finds the value in the blob.
const findValue = ^uint64(0)

// A linkBatch is the slots of one block, handed to the linker.
type linkBatch struct {
	first   uint32
	parents []uint64 // the parent id of each slot from first on
	// For each slot of a kind with secondary indexes, one per index: where
	// the indexed value is in the blob (start<<32 | end; 0 if the node has
	// no such attribute, findValue if the linker must look).
	vals []uint64
	// New copies of the state's outer slices (nil if unchanged).
	slab     []*[layout.SlabSize]layout.Rec
	chunks   [][]byte
	kindSets []*idset.Set
	// The block reader's position after the block, for errors.
	blocks int
	off    int64
}

func (ld *loader) startLinker() {
	lk := &linker{
		s:     ld.s,
		count: ld.count,
		todo:  make(chan *linkBatch, 4),
		free:  make(chan *linkBatch, 8),
		done:  make(chan struct{}),
	}
	ld.lk = lk
	ld.cur = &linkBatch{first: ld.s.NSlots}
	go lk.run()
}

// handOff sends the current batch to the linker and starts the next.
func (ld *loader) handOff() {
	s, b := ld.s, ld.cur
	if len(b.parents) == 0 {
		return
	}
	if len(s.Slab) != ld.sentSlab {
		b.slab, ld.sentSlab = slices.Clone(s.Slab), len(s.Slab)
	}
	if len(s.Arena.Chunks) != ld.sentChunks {
		b.chunks, ld.sentChunks = slices.Clone(s.Arena.Chunks), len(s.Arena.Chunks)
	}
	if len(s.kindSets) != ld.sentKinds {
		b.kindSets, ld.sentKinds = slices.Clone(s.kindSets), len(s.kindSets)
	}
	b.blocks, b.off = ld.br.blocks, ld.br.off
	n := cap(b.parents)
	ld.lk.todo <- b // b is the linker's now
	select {
	case ld.cur = <-ld.lk.free:
	default:
		ld.cur = &linkBatch{parents: make([]uint64, 0, n)}
	}
	ld.cur.first = s.NSlots
}

// stopLinker hands over what was decoded, waits for the linker to finish
// and returns its error.
func (ld *loader) stopLinker() error {
	ld.handOff()
	close(ld.lk.todo)
	<-ld.lk.done
	return ld.lk.err
}

func (lk *linker) run() {
	defer close(lk.done)
	for b := range lk.todo {
		if b.slab != nil {
			lk.slab = b.slab
		}
		if b.chunks != nil {
			lk.chunks = b.chunks
		}
		if b.kindSets != nil {
			lk.kindSets = b.kindSets
		}
		if lk.err == nil {
			lk.err = lk.link(b)
		}
		b.parents, b.vals = b.parents[:0], b.vals[:0]
		b.slab, b.chunks, b.kindSets = nil, nil, nil
		select {
		case lk.free <- b:
		default:
		}
	}
}

func (lk *linker) At(slot uint32) *layout.Rec {
	return &lk.slab[slot>>layout.SlabBits][slot&(layout.SlabSize-1)]
}

func (lk *linker) blob(r *layout.Rec) []byte {
	off := uint32(r.Blob)
	return lk.chunks[r.Blob>>32][off : off+r.BLen : off+r.BLen]
}

func (lk *linker) KidsOf(slot uint32) []uint32 { return lk.s.Kids.List(lk.At(slot).Kids) }

func (lk *linker) Name(slot uint32) []byte {
	name, _ := layout.SplitBlob(lk.blob(lk.At(slot)))
	return name
}

// link indexes and links the slots of a batch.
func (lk *linker) link(b *linkBatch) error {
	s := lk.s
	// The path index is sized for the header's count once the records
	// decoded are a thousandth of it, and for those records until then:
	// the first block is usually enough, so that the table is built once,
	// and a count the records do not bear out costs at most a thousand
	// times their own index (a few KiB a record).
	have := uint64(b.first) + uint64(len(b.parents))
	want := have
	if lk.count <= 1024*have {
		want = max(have, lk.count)
	}
	s.Paths.Reserve(lk, int(want))
	vi := 0
	for i, parent := range b.parents {
		slot := b.first + uint32(i)
		r := lk.At(slot)
		s.SetSlotOf(r.ID, slot)
		if r.ID == layout.RootID {
			continue
		}
		lk.kindSets[r.Kind].Add(slot)
		if xs := lk.indexesOf(r.Kind); len(xs) > 0 {
			blob := lk.blob(r)
			for j, x := range xs {
				var v []byte
				switch e := b.vals[vi]; e {
				case 0:
				case findValue:
					_, attrs := layout.SplitBlob(blob)
					v, _ = codec.AttrValue(attrs, x.key)
				default:
					v = blob[e>>32 : uint32(e)]
				}
				vi++
				if v != nil {
					lk.pcs[r.Kind][j].add(x, v, slot)
				}
			}
		}
		if parent >= r.ID {
			r.Parent = layout.NoParent
			lk.late = append(lk.late, lateParent{slot, parent})
			continue
		}
		// Siblings tend to come together: the last parent is
		// remembered, with the name of the child last added to it.
		ps := lk.lastParent
		if parent != lk.lastParentID {
			var ok bool
			if ps, ok = s.SlotOf(parent); !ok {
				return fmt.Errorf("%w: block %d (byte %d): node %d: parent %d does not exist", ErrCorrupt, b.blocks, b.off, r.ID, parent)
			}
		}
		r.Parent = ps
		pr := lk.At(ps)
		name := lk.Name(slot)
		if pr.Kids == 0 {
			h, err := s.Kids.Insert(0, 0, slot, layout.KidRollback)
			if err != nil {
				return err
			}
			pr.Kids = h
		} else {
			// Children mostly arrive in name order: one comparison
			// with the last one keeps the list sorted; loader.link
			// sorts the others.
			k := s.Kids.Region(pr.Kids)
			n := k[0]
			last := lk.lastName
			if ps != lk.lastParent {
				last = lk.Name(k[1+n])
			}
			if bytes.Compare(last, name) >= 0 {
				if u := len(lk.unsorted); u == 0 || lk.unsorted[u-1] != ps {
					lk.unsorted = append(lk.unsorted, ps)
				}
			}
			if n < k[1] {
				k[2+n] = slot
				k[0] = n + 1
			} else {
				h, err := s.Kids.Insert(pr.Kids, int(n), slot, layout.KidRollback)
				if err != nil {
					return err
				}
				pr.Kids = h
			}
		}
		// The node goes in the path index, and on the chain.
		if sum, depth, ok := lk.parentSum(ps); ok {
			sum += s.Paths.Level(depth+1, name)
			s.Paths.Add(s.Paths.Key(sum), slot)
			lk.chain = append(lk.chain, chainLink{slot, depth + 1, sum})
		}
		lk.lastParentID, lk.lastParent, lk.lastName = parent, ps, name
	}
	return nil
}

// indexesOf returns the secondary indexes of a kind (all defined by the
// header, so fixed while records arrive) and the set of their keys below
// 0x80 as a bit mask.
func (ld *loader) indexesOf(kind uint32) ([]*secIndex, *[2]uint64) {
	for int(kind) >= len(ld.xs) {
		xs := ld.s.kindIndexes[uint32(len(ld.xs))]
		var mask [2]uint64
		for _, x := range xs {
			if x.key < 0x80 {
				mask[x.key>>6] |= 1 << (x.key & 63)
			}
		}
		ld.xs = append(ld.xs, xs)
		ld.masks = append(ld.masks, mask)
		if len(xs) > len(ld.vals) {
			ld.vals = make([]uint64, len(xs))
		}
	}
	return ld.xs[kind], &ld.masks[kind]
}

// indexesOf returns the secondary indexes of a kind (all defined by the
// header, before the linker starts).
func (lk *linker) indexesOf(kind uint32) []*secIndex {
	for int(kind) >= len(lk.xs) {
		xs := lk.s.kindIndexes[uint32(len(lk.xs))]
		pcs := make([]*postCache, len(xs))
		for i := range pcs {
			pcs[i] = new(postCache)
		}
		lk.xs = append(lk.xs, xs)
		lk.pcs = append(lk.pcs, pcs)
	}
	return lk.xs[kind]
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
	n := d.Uvarint("dictionary ref")
	if d.Err != nil {
		return 0
	}
	if n < uint64(len(*dict)) {
		return (*dict)[n]
	}
	if n > uint64(len(*dict)) {
		d.Fail("dictionary ref %d beyond %d entries", n, len(*dict))
		return 0
	}
	name := d.Str("dictionary entry", MaxNameLen)
	if d.Err != nil {
		return 0
	}
	// Index definitions in the header may have interned a name already;
	// what must not happen is the dictionary defining it twice.
	var i uint32
	if kind {
		if name != "" || len(*dict) != 0 {
			if err := ValidName(name); err != nil {
				d.Fail("kind: %s", detail(err))
				return 0
			}
		}
		i = ld.s.internKind(name)
	} else {
		if err := ValidName(name); err != nil {
			d.Fail("attribute key: %s", detail(err))
			return 0
		}
		i = ld.s.internKey(name)
	}
	if slices.Contains(*dict, i) {
		d.Fail("dictionary entry %q defined twice", name)
		return 0
	}
	*dict = append(*dict, i)
	return i
}

// link links the nodes whose parent came later, sorts the child lists
// that did not arrive in name order, and checks that sibling names are
// unique and that every node hangs from the root.
func (ld *loader) link() error {
	s, lk := ld.s, ld.lk
	for _, l := range lk.late {
		ps, ok := s.SlotOf(l.parent)
		if !ok {
			return ld.br.corrupt("node %d: parent %d does not exist", s.At(l.slot).ID, l.parent)
		}
		s.At(l.slot).Parent = ps
		pr := s.At(ps)
		h, err := s.Kids.Insert(pr.Kids, len(s.Kids.List(pr.Kids)), l.slot, layout.KidRollback)
		if err != nil {
			return err
		}
		pr.Kids = h
		lk.unsorted = append(lk.unsorted, ps)
	}
	slices.Sort(lk.unsorted)
	cmp := func(a, b uint32) int { return bytes.Compare(s.Name(a), s.Name(b)) }
	for _, slot := range slices.Compact(lk.unsorted) {
		k := s.KidsOf(slot)
		if strictlySorted(s, k) {
			continue
		}
		slices.SortFunc(k, cmp)
		for j := 1; j < len(k); j++ {
			if cmp(k[j-1], k[j]) == 0 {
				return ld.br.corrupt("two children of node %d named %q", s.At(slot).ID, s.Name(k[j]))
			}
		}
	}
	if len(lk.late) == 0 {
		s.Paths.Flush()
		// Every parent came before its children, starting from the root
		// (the first record): all are reachable, no cycle is possible.
		return nil
	}
	// Every node must be reachable from the root (no cycles).
	seen := 1
	stack := []uint32{layout.RootSlot}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		kids := s.KidsOf(n)
		seen += len(kids)
		stack = append(stack, kids...)
	}
	if seen != int(s.NSlots) {
		return ld.br.corrupt("%d of %d nodes are not reachable from the root (a parent cycle)", int(s.NSlots)-seen, s.NSlots)
	}
	// The linker left out the nodes below those linked late.
	s.Paths.Rebuild(s, layout.BucketsFor(seen-1))
	return nil
}

// strictlySorted reports whether the names of k increase strictly (sorted,
// no two equal): the usual case, settled in one comparison per child.
func strictlySorted(s *state, k []uint32) bool {
	prev := s.Name(k[0])
	for _, c := range k[1:] {
		cur := s.Name(c)
		if bytes.Compare(prev, cur) >= 0 {
			return false
		}
		prev = cur
	}
	return true
}
