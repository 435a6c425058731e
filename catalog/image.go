package catalog

import (
	"bytes"
	"fmt"
	"io"
	"slices"

	"github.com/metatree/metatree/catalog/internal/imagefmt"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// The image body's format, its writing and its reading are package
// internal/imagefmt; Save walks the tree for it and Load builds a tree
// from its records (load.go).

// saveChunkIDs is how many ids Save handles per lock hold (a variable so
// that tests can force tiny chunks).
var saveChunkIDs uint64 = 2048

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

	version := byte(imagefmt.V1)
	if len(lr.links) > 0 {
		version = imagefmt.Version
	}
	if err := imagefmt.WriteHead(w, version); err != nil {
		return err
	}
	bw := imagefmt.NewBlockWriter(w)
	bw.Payload = imagefmt.AppendHeader(bw.Payload, imagefmt.Header{Index: lr.v, NextID: nextID, Count: count, Defs: defs})
	if err := bw.Flush(); err != nil {
		return err
	}

	enc := imagefmt.NewRecordEncoder()
	var written, prevID uint64
	bw.Payload = append(bw.Payload, imagefmt.BlockNodes)
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
			bw.Payload = lr.appendRecord(bw.Payload, enc, &r, prevID)
			prevID = id
			written++
		}
		t.mu.RUnlock()
		if len(bw.Payload) >= imagefmt.BlockBytes {
			if err := bw.Flush(); err != nil {
				return err
			}
			bw.Payload = append(bw.Payload, imagefmt.BlockNodes)
		}
	}
	if len(bw.Payload) > 1 {
		if err := bw.Flush(); err != nil {
			return err
		}
	}
	bw.Payload = bw.Payload[:0]
	var prevOwned uint64
	for i, l := range lr.links {
		if len(bw.Payload) == 0 {
			bw.Payload = append(bw.Payload, imagefmt.BlockLinks)
		}
		bw.Payload = imagefmt.AppendLink(bw.Payload, l, prevOwned)
		prevOwned = l.Owned
		if len(bw.Payload) >= imagefmt.BlockBytes || i == len(lr.links)-1 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	}
	if written != count {
		// An internal invariant: the id pages and the node count disagree.
		return fmt.Errorf("catalog: save: wrote %d nodes, tree has %d", written, count)
	}
	bw.Payload = imagefmt.AppendEnd(bw.Payload, count, bw.Blocks)
	return bw.Flush()
}

// appendRecord appends the image record of r (see imagefmt.RecordEncoder).
func (lr *longRead) appendRecord(p []byte, enc *imagefmt.RecordEncoder, r *layout.Rec, prevID uint64) []byte {
	var parentID uint64
	if r.ID != layout.RootID {
		parentID = lr.recAt(r.Parent).ID
	}
	s := lr.s
	return enc.Append(p, r, prevID, parentID, s.Blob(r), s.kinds, s.keys)
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
