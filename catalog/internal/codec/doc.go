// Package codec holds the byte-level encodings the catalog's formats are
// made of, and the reader that decodes them: uvarints and zigzag varints
// in their shortest form only (Overlong), strings as a uvarint length and
// the bytes (AppendStr, Reader.Str), values as a type byte and a payload
// (ValueLen), and a node's attributes as a count and then each key's
// number and value (AttrIter, AttrValue).
//
// The contract: every encoding is canonical, one value has one encoding,
// so that encoded batches, blobs and index keys compare as bytes. The
// Reader takes untrusted input (entries, image blocks): it never panics,
// and its first failure is ErrMalformed naming what was read and the byte
// offset. AttrIter and ValueLen read blobs package catalog wrote, which
// are well formed; a blob that is not is an internal invariant broken,
// which panics. ErrUnknownVersion is the one error of a format version
// this code does not read, batch or image. Package catalog builds its
// batch format (codec.go) on these, and owns the mapping from value types
// to Values; package internal/imagefmt builds the image records on them.
//
// Goroutines: the package starts none and keeps no state; a Reader is
// used by one goroutine at a time.
package codec
