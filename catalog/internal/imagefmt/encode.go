package imagefmt

import (
	"encoding/binary"

	"github.com/metatree/metatree/catalog/internal/codec"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// Header is what the header block says: the index the image is of, the
// tree's next id, its node count, and its secondary index definitions
// (kind, attribute).
type Header struct {
	Index, NextID, Count uint64
	Defs                 [][2]string
}

// AppendHeader appends the payload of the header block.
func AppendHeader(p []byte, h Header) []byte {
	p = append(p, BlockHeader)
	p = binary.AppendUvarint(p, h.Index)
	p = binary.AppendUvarint(p, h.NextID)
	p = binary.AppendUvarint(p, h.Count)
	p = binary.AppendUvarint(p, uint64(len(h.Defs)))
	for _, d := range h.Defs {
		p = codec.AppendStr(p, d[0])
		p = codec.AppendStr(p, d[1])
	}
	return p
}

// RecordEncoder appends records, numbering the kinds and keys of one image
// in order of first use.
type RecordEncoder struct {
	kindRef, keyRef map[uint32]uint64
}

// NewRecordEncoder returns the encoder of one image's records.
func NewRecordEncoder() *RecordEncoder {
	return &RecordEncoder{kindRef: map[uint32]uint64{}, keyRef: map[uint32]uint64{}}
}

// Append appends the record of r, whose blob is blob, whose parent's id
// is parentID (0 for the root) and whose predecessor in the image has id
// prevID; kinds and keys are the tree's names of its kind and key numbers.
func (e *RecordEncoder) Append(p []byte, r *layout.Rec, prevID, parentID uint64, blob []byte, kinds, keys []string) []byte {
	p = binary.AppendUvarint(p, r.ID-prevID)
	p = binary.AppendUvarint(p, parentID)
	name, attrs := layout.SplitBlob(blob)
	p = binary.AppendUvarint(p, uint64(len(name)))
	p = append(p, name...)
	p = appendRef(p, e.kindRef, r.Kind, kinds)
	p = binary.AppendUvarint(p, r.Created)
	p = binary.AppendUvarint(p, r.Modified-r.Created)
	it := codec.NewAttrIter(attrs)
	p = binary.AppendUvarint(p, uint64(it.Len()))
	for {
		k, v, ok := it.Next()
		if !ok {
			break
		}
		p = appendRef(p, e.keyRef, k, keys)
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

// Link is an ownership as images carry it: the owned node's id, its
// owner's, and 1 if the owned node is an orphan.
type Link struct {
	Owned, Owner uint64
	Orphan       byte
}

// AppendLink appends the link l, whose predecessor in the image is owned
// by prevOwned.
func AppendLink(p []byte, l Link, prevOwned uint64) []byte {
	p = binary.AppendUvarint(p, l.Owned-prevOwned)
	p = binary.AppendUvarint(p, l.Owner)
	return append(p, l.Orphan)
}

// AppendEnd appends the payload of the end block, after nodes in blocks.
func AppendEnd(p []byte, nodes uint64, blocks int) []byte {
	p = append(p, BlockEnd)
	p = binary.AppendUvarint(p, nodes)
	return binary.AppendUvarint(p, uint64(blocks))
}
