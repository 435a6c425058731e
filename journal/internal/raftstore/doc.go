// Package raftstore keeps a raft node's log and hard state in Pebble and
// serves them to go.etcd.io/raft/v3 as a [raft.Storage].
//
// The journal's append goroutine calls [Store.Append] once for all the
// Readys' writes queued meanwhile: the snapshot metadata (if any), the new
// entries and the newest HardState go into ONE Pebble batch, committed with
// fsync when raft requires it, in that order, so a
// crash can never leave the HardState ahead of the entries it commits. The
// in-memory view raft reads (first and last index, a byte-bounded cache of
// recent entries) changes only after that commit has returned.
//
// Keys:
//
//	l/<index, 8 bytes big-endian>   an entry: version, flags, term, type, data
//	m/fmt                           on-disk format version
//	m/hs                            HardState (protobuf)
//	m/snap                          raft snapshot: metadata plus the image
//	                                reference in Data, never the state itself
//	m/trunc                         (index, term) of FirstIndex()-1
//	m/conf/<index BE>               membership blob as of that index
//
// At Open the store checks trunc <= snapshot <= HardState.Commit <= last
// index, and that the log starts right after trunc; a store that breaks them
// is refused with an error wrapping [ErrCorrupt] rather than handed to raft,
// which would panic on it later ("tocommit out of range", etcd#10219).
//
// A Store is safe for concurrent use. The raft.Storage methods return raft's
// own sentinel errors unwrapped (raft compares them with ==).
package raftstore
