// Package imagefmt is the catalog's image body format, writing and
// reading: the framing of checksummed blocks (BlockWriter, BlockReader),
// the payload of each block type (AppendHeader, RecordEncoder, AppendLink,
// AppendEnd) and the Decoder that reads a body back, checking its magic,
// version, checksums, block order and every record. Package catalog walks
// its tree to write an image (Tree.Save) and builds a tree from the records
// a Decoder decodes (Tree.Load, in load.go): the Decoder puts each record
// in a slot of the tree's layout (internal/layout), its blob in the
// layout's arena, and package catalog links the slots into the tree.
//
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
// increasing key order; links (see catalog.Owner) in increasing owned id
// order; kinds and keys are dictionary-coded in order of first use. The
// content determines the bytes, so replicas that applied the same entries
// write identical bodies. Varints in records take their shortest form, and
// the Decoder refuses longer ones: attribute values are kept and indexed in
// their encoded form. The Decoder reads exactly up to the end block and no
// further, so the body can sit inside a larger file.
//
// The contract: whatever the input, the Decoder never panics, and every
// failure to read a body is ErrCorrupt saying which block and byte (the
// input's own error, with operr's operational mark, when reading fails),
// or codec.ErrUnknownVersion for a version it does not read. Package
// catalog exports both sentinels as its own.
//
// Goroutines: the package starts none and keeps no state of its own; a
// BlockWriter, BlockReader, RecordEncoder or Decoder is used by one
// goroutine at a time. A Decoder calls its Tree and writes its Store (new
// slots, the blobs in the arena) on the goroutine that calls it.
package imagefmt
