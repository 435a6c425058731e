package catalog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/layout"
	"github.com/metatree/metatree/internal/operr"
)

// The image body, version 2 (version 1 is the same without 'O' blocks;
// Save writes version 1 when nothing is owned, so such a tree's body is
// what older code wrote and reads):
//
//	body   := magic:"MTCATIMG" version:byte block*
//	block  := len:uvarint payload:[len]byte crc:uint32le   (CRC-32C of len's bytes and payload)
//	payload:= 'H' index nextID nodes:uvarint nindexes:uvarint (kind:str attr:str)*
//	        | 'N' record*                                   (up to ~64 KiB a block)
//	        | 'O' link*                                     (after the 'N' blocks)
//	        | 'E' nodes:uvarint blocks:uvarint              (the last block)
//	link   := ownedIDDelta:uvarint ownerID:uvarint orphan:byte
//	record := idDelta:uvarint parentID:uvarint name:str kind:ref created:uvarint
//	          modifiedDelta:uvarint nattrs:uvarint (key:ref value)*
//	ref    := n:uvarint [str if n is the next dictionary entry]
//
// Nodes appear in increasing id order, the root first; attributes in
// increasing key order; links (see Owner) in increasing owned id order;
// kinds and keys are dictionary-coded in order of
// first use. The content determines the bytes, so replicas that applied the
// same entries write identical bodies. Varints in records take their
// shortest form, and Load refuses longer ones: attribute values are kept
// and indexed in their encoded form. Load reads exactly up to the end
// block and no further, so the body can sit inside a larger file.

const (
	imageMagic      = "MTCATIMG"
	imageVersion    = 2 // the newest read and written
	imageV1         = 1 // no ownerships
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
		return operr.Errorf("catalog: save: %w", err)
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

	version := byte(imageV1)
	if len(lr.links) > 0 {
		version = imageVersion
	}
	if _, err := io.WriteString(w, imageMagic+string([]byte{version})); err != nil {
		return operr.Errorf("catalog: save: %w", err)
	}
	bw := &blockWriter{w: w, payload: make([]byte, 0, imageBlockBytes+4096)}
	p := append(bw.payload, 'H')
	p = binary.AppendUvarint(p, lr.v)
	p = binary.AppendUvarint(p, nextID)
	p = binary.AppendUvarint(p, count)
	p = binary.AppendUvarint(p, uint64(len(defs)))
	for _, d := range defs {
		p = codec.AppendStr(p, d[0])
		p = codec.AppendStr(p, d[1])
	}
	bw.payload = p
	if err := bw.flush(); err != nil {
		return err
	}

	kindRef := map[uint32]uint64{}
	keyRef := map[uint32]uint64{}
	var written, prevID uint64
	bw.payload = append(bw.payload, 'N')
	for id := uint64(layout.RootID); id <= maxID; {
		end := min(id+saveChunkIDs, maxID+1)
		t.mu.RLock()
		for ; id < end; id++ {
			// Skip to the next page in use, or to the next id deleted
			// since the save began (whose page may be gone): the walk
			// costs what the tree holds, not the span of its ids.
			if next := lr.nextFrom(id); next != id {
				id = min(next, maxID+1) - 1
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
	var prevOwned uint64
	for i, l := range lr.links {
		if len(bw.payload) == 0 {
			bw.payload = append(bw.payload, 'O')
		}
		bw.payload = binary.AppendUvarint(bw.payload, l.owned-prevOwned)
		bw.payload = binary.AppendUvarint(bw.payload, l.owner)
		bw.payload = append(bw.payload, l.orphan)
		prevOwned = l.owned
		if len(bw.payload) >= imageBlockBytes || i == len(lr.links)-1 {
			if err := bw.flush(); err != nil {
				return err
			}
		}
	}
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

func (lr *longRead) appendRecord(p []byte, r *layout.Rec, prevID uint64, kindRef, keyRef map[uint32]uint64) []byte {
	s := lr.s
	p = binary.AppendUvarint(p, r.ID-prevID)
	var parentID uint64
	if r.ID != layout.RootID {
		pr := lr.recAt(r.Parent)
		parentID = pr.ID
	}
	p = binary.AppendUvarint(p, parentID)
	name, attrs := layout.SplitBlob(s.Blob(r))
	p = binary.AppendUvarint(p, uint64(len(name)))
	p = append(p, name...)
	p = appendRef(p, kindRef, r.Kind, s.kinds)
	p = binary.AppendUvarint(p, r.Created)
	p = binary.AppendUvarint(p, r.Modified-r.Created)
	it := codec.NewAttrIter(attrs)
	p = binary.AppendUvarint(p, uint64(it.Len()))
	for {
		k, v, ok := it.Next()
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
	return codec.AppendStr(p, names[i])
}

// Load replaces the whole tree with the image body read from r. The new
// tree is built aside and swapped in at once (readers see the old tree or
// the new one); on any error the tree is unchanged. Truncated, corrupted or
// inconsistent input is an error wrapping ErrCorrupt that says where;
// an unknown format version is ErrUnknownVersion. Every watcher receives a
// final OpResync event (if its buffer has room) and is closed with
// ErrResync. Load reads exactly the bytes Save wrote. It keeps two cores
// busy while it runs (see linker in load.go).
func (t *Tree) Load(r io.Reader) error {
	s, err := readImage(r, true)
	if err != nil {
		return err
	}
	t.adopt(s)
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
		return operr.Errorf("catalog: load: block %d (byte %d): %w", br.blocks, br.off, err)
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
	// The payload is read as it arrives, the buffer growing with it, so
	// that what is allocated follows the bytes there are, not the length
	// the block claims.
	need := int(l) + 4
	b := br.buf[:0]
	for len(b) < need {
		step := min(need, max(2*len(b), 64<<10))
		b = slices.Grow(b, step-len(b))
		if err := br.readFull(b[len(b):step], "block payload"); err != nil {
			return nil, err
		}
		b = b[:step]
	}
	br.buf = b
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
