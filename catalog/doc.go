// Package catalog is metatree's replicated in-memory catalog: a tree of
// typed nodes (databases, tables, tablets, replicas, jobs, members, ...)
// changed only by atomic batches of operations, with indexes and watches,
// and an image body to checkpoint it.
//
// A [Tree] is a deterministic state machine. The journal commits encoded
// batches ([Batch.Encode]) and calls [Tree.Apply] with each one, in log
// order, on every replica; node ids come from a counter inside the tree, so
// every replica assigns the same ids and holds the same tree. A batch applies
// all its operations or none: a failed precondition or any other failing
// operation leaves the tree as it was and returns an [*OpError] naming the
// operation.
//
// Batches carry a format version: [Batch.Encode] writes the oldest that
// carries the batch, [Batch.EncodeVersion] the cluster's (version 2 adds
// [Cond.Match], version 3 [Op.Owner], version 4 [Quota.Exempt]'s
// exemption, see codec.go). A batch of a version the tree does not read changes
// nothing, not even the index, and its [Result.Halt] tells the journal to
// stop rather than skip it ([Tree.LimitFormat] makes a tree read as an
// older binary would).
//
// Reads ([Tree.Get], [Tree.GetID], [Tree.Children], [Tree.OfKind],
// [Tree.Find]) run concurrently with the applier and see the tree between
// batches. [Tree.Read] reads in place without copying or allocating: a
// [Reader] and its [View]s (lookups, children, subtrees, index matches,
// attributes by name), all at one index. Watches ([Tree.Watch]) deliver
// the changes of a subtree or a kind in log order through [Watcher.Next]:
// Apply records each batch's events once in a ring shared by all watchers
// and kicks one notifier goroutine, which wakes the watchers off the
// applier's goroutine (see notify.go), so its cost does not grow with the
// number of watchers; a watcher that falls behind is cut off
// and told to resync rather than slowing the applier. [Tree.WatchFrom] resumes a watch after a
// past index by replaying the retained log ([History]) and then going live,
// with no gap and no duplicate, or fails with [ErrCompacted];
// [Watcher.Progress] tells an idle watcher how far it has seen. [Tree.Save] and [Tree.Load] write and read
// the image body, streamed and checksummed (its format is package
// internal/imagefmt).
//
// Every tree keeps a [Digest] of its whole content ([Tree.Digest]): every
// node's path, kind, attributes, created and modified indexes, the
// secondary index definitions and the ownerships, but nothing local
// (slots, the order names were interned in). Replicas at the same index
// hold equal digests, whether they replayed the log or loaded an image, so
// comparing them finds a replica that diverged. A digest is the sum of one
// hash for each node (and index definition and ownership), kept current as
// batches apply at the cost of one hash per node a batch touches (see
// digest.go), in one of two formats ([DigestFormat]): format 1 sums
// modulo 2^256 SHA-256 hashes of each node's path and content; format 2,
// the newest and a fraction of the cost, sums modulo 2^128 seeded XXH3-128
// hashes of each node's id, parent id, name and content. Node ids are
// replicated (assigned in log order, carried by images, kept by moves),
// and the (id, parent id, name) of every node fix every path, so format 2
// covers what format 1 does, and a move changes one element instead of a
// subtree's.
//
// Two different catalogs collide only with negligible probability. In
// either format each node's encoding is unique within a catalog (it holds
// the node's path, or its id), so the two catalogs' sets of encodings
// differ in some encoding e that is in one sum and not in the other.
// Modelling the hash as a random function of its input, the hash of e is
// uniform and independent of the rest, so the sums are equal with
// probability 2^-256 (format 1) or 2^-128 (format 2): comparing every
// second for a century is 3*10^9 comparisons, which leaves format 2 a
// chance of a missed divergence below 10^-29. XXH3 is no cryptographic
// hash, but its 128-bit output passes the SMHasher tests of distribution
// and independence, which is what the model asks of it for the faults it
// meets here: accidents (bugs, flipped bits, a wrong image), not an
// adversary. Someone who chooses many nodes' contents to make sums cancel
// can do much better than chance against any additive multiset hash, and
// against XXH3, whose seed is public, at once.
//
// A create can name an owner (Op.Owner): another node and its current
// version, its Modified index (or 0: the version it has when the batch
// applies). The operation that next changes the owner
// (an update or a move) or deletes it ends that version, and in the same
// apply every node the version owns is deleted with its subtree or, if it
// asked, kept and marked orphaned (OrphanedAttr, ParseOrphanMark), on
// every replica alike; an owner index makes that cost what the version
// owns (see owner.go). The heartbeat package ties nodes to a member's
// epoch this way (heartbeat.OwnerOf, heartbeat.Fence).
//
// The layout is compact (BenchmarkDorisScale reports its heap in bytes a
// node, and BenchmarkNaiveTreeMemory against a map-of-pointers tree): nodes are
// fixed-size pointer-free records in a slab, names and attributes packed in
// a byte arena, child lists and index postings in pooled arrays (package
// internal/layout holds that storage, the child lists, the path index and
// the id table; store.go the rest of a tree's state). Reads that return many nodes, and Save, read at one index
// without holding the lock throughout (see longread.go). Tree owns one
// goroutine, the watch notifier, from its first watcher to its last (the
// last Close waits for it); Load uses a second one while it runs (see
// load.go).
package catalog
