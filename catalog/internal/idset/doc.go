// Package idset is an ordered set of uint32 slot numbers kept in sorted chunks.
//
// It is the posting list of the catalog's kind and secondary indexes: ids are
// mostly added in increasing order (ids come from a counter), so adds append
// to the last chunk, while removals and out-of-order adds touch one chunk of
// at most a few thousand entries rather than moving the whole list. It costs
// about 4 bytes an entry and holds no pointers per id.
//
// A Set is not safe for concurrent mutation; the catalog guards it with its
// own lock.
package idset
