// Package image keeps the checkpoints ("images") that bound a metatree
// journal: it writes them by shadow replay, serves them over HTTP, restores
// them from peers and loads them at startup.
//
// An image is one file, image/image.<index> under the node's data dir:
//
//	header   magic "MTIMAGE\x00", format version, flags, header length,
//	         cluster id, index, term, membership blob, header CRC32C
//	body     the state's Save output, streamed
//	trailer  body length, end magic "MTIMGEND", CRC32C over every byte before it
//
// Every decode failure is reported with an error for which
// errors.Is(err, [ErrCorrupt]) holds, naming the file and what is wrong; an
// image written by a newer format gives [ErrUnknownVersion] and one from
// another cluster [ErrClusterMismatch].
//
// The pieces, and what a host wires (see Example_wiring):
//
//  1. [Open] a [Store] on the data dir with the live [State] (a
//     *catalog.Tree). The Store implements the journal's Snapshots hook
//     ([Store.LoadLatest], [Store.Fetch], [Store.Install]); pass it as
//     journal.Config.Snapshots.
//  2. After journal.Open, tell the Store the cluster id
//     ([Store.SetClusterID]); an image from another cluster fails there, at
//     startup.
//  3. Mount [Store.Handler] under "/image/" on the node's HTTP server so that
//     peers can fetch images from it.
//  4. Start a [Checkpointer] with the journal's image log
//     (journal.ImageLogOf(j), which satisfies [Journal]) and a constructor
//     for fresh shadow states. It owns one goroutine; Close it
//     before closing the journal and the Store. To spare the raft leader
//     the shadow copy, set Enabled (false while leading) and Peers (the
//     other nodes' addresses): the leader then adopts a peer's image, kept
//     on disk without loading it, so that its log is compacted as well.
//
// Writes are crash safe: image.ckpt is written, fsynced, renamed to
// image.<index> and the directory fsynced; older images are deleted only
// after that, and at a pace (Config.DeleteBytesPerSec): renamed to
// image.<index>.trash (a fetched or quarantined image keeps its .fetched or
// .corrupt before it), then truncated a step at a time before they are
// removed, so that a filesystem that discards freed blocks does not stall
// the journal's fsyncs while it trims a whole image (see shred.go). Open
// shreds whatever trash a crash or a Close left. Restores are single-flight
// per data dir: callers that ask
// while one runs wait for its result (the failure of apache/doris#69642 was
// several restores mixing files in one directory).
//
// Unlike catalog, image owns two goroutines: the Checkpointer's timer loop,
// which checks the threshold every interval, and the Store's shredder of
// old images. Each one's Close stops it and waits.
// Two more live only within a call and are joined before it returns: a
// restore decodes the image (when the State is a Stager) while Fetch
// downloads it, and an adoption checks peers in parallel.
package image
