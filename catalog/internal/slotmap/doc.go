// Package slotmap holds ordered sets of uint32 slot numbers, and ordered
// maps from slot numbers to uint32 values, in sorted chunks.
//
// They are the catalog's owner index: many owned nodes, each needing the
// few bytes that name its owner. A set entry takes 4 bytes and a map entry
// 8 (the key and value packed in one word), in chunks of at most 512
// entries that grow by doubling up to that size, so a small set costs its
// entries and a large one about 4 (or 8) bytes an entry. Entries mostly
// arrive in increasing key order and leave from the end (slots come from a
// counter; the catalog removes an owner's nodes newest first), which touch
// only the last chunk; any other insertion or removal moves at most one
// chunk's entries.
//
// Neither type is safe for concurrent mutation; the catalog guards them
// with its own lock.
package slotmap
