// Package layout is the catalog's compact in-memory layout: the storage of a
// tree's nodes and the structures that find them, with no knowledge of
// batches, watches or images. Package catalog builds its tree on a Store;
// nothing else imports this package.
//
// A node is a fixed-size, pointer-free Rec (48 bytes) in a chunked slab,
// addressed by a dense slot number that is private to this process (slots
// are reused and differ between replicas; nothing observable depends on
// them: results are ordered by id or name). Its name and attributes live in
// one blob in an append-only byte arena (compacted when mostly garbage);
// kinds and attribute keys are interned, values are varint-packed. Children
// are sorted lists of slots in a pooled array (kids.go); a path maps to its
// slot through a hash table of whole-path hashes (pathindex.go), a local
// index like the slots; ids map to slots through pages of a direct table
// (ids are dense, from a counter) under a radix whose levels exist only over
// ids in use (idtable.go); kind sets and index postings (package catalog's)
// are chunked sorted slot sets (internal/idset). The GC sees a few thousand
// large pointer-free arrays instead of millions of small objects.
// BenchmarkDorisScale reports the bytes a node this costs, and
// BenchmarkNaiveTreeMemory compares it with a tree of maps and pointers.
//
// Limits of the layout: a sorted child list is moved on insert, so a node
// with millions of children inserted in random name order is slow to build
// (appends in name order are fast); a move re-keys the moved node's
// descendants in the path index (their paths change), so it costs in
// proportion to the subtree; slots are uint32 (4 billion live nodes); ids
// are below 2^40 (a tree hands out about a trillion, and a create past that
// fails with ErrCapacity); one node's name and attributes are at most about
// 4 MiB; child lists live in at most 4,096 chunks (kids.go), of 1 Mi slots
// each or one list too big for the size classes, and a batch that would need
// more fails with ErrCapacity. The pool's layout depends on the history of
// allocations, so a replica near that limit may refuse a batch another
// accepts: it is far beyond the memory a catalog is sized for.
//
// The contract: a Store holds recs in slots, their blobs (a name, then
// attributes the catalog encodes) in its Arena, the id of each rec in its id
// table (SetSlotOf, ClearSlotOf, LookupID), each node's children in its
// KidPool, sorted by name, and every node linked below the root in its
// PathIndex under its whole path. The link operations (InsertKid, LinkKidAt,
// RemoveKid, RekeyBelow) keep the child lists and the path index in step;
// the owner keeps the recs' fields and the id table. Lookups (Resolve,
// LookupKid, LookupID, PathOf) are exact whatever the hashes do, allocate
// nothing, and read a state between batches. Errors: a child list that finds
// no room is ErrCapacity; every other failure is an internal invariant,
// which panics.
//
// Goroutines: the package starts none and has no lock. A Store is mutated by
// one goroutine at a time, the owner's applier under the owner's write lock
// (or Load's decoder, catalog/internal/imagefmt's, and its linker before the
// store is published, each touching the fields catalog's load.go names);
// readers hold the owner's read lock, and see the path index flushed.
package layout
