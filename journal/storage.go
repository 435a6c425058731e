package journal

import (
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal/internal/raftstore"
)

// ImageRequester is optionally implemented by a Snapshots hook. The journal
// calls RequestImage (without blocking on it) when raft needs to send a
// follower a snapshot and the newest image cannot serve it: the image
// predates the follower's membership, so raft on the follower would reject
// it. The hook should write a new image soon (a checkpoint on demand).
type ImageRequester interface {
	RequestImage()
}

// raftStorage is the raft.Storage the RawNode reads: the Pebble store, with
// Snapshot refusing (temporarily) an image whose ConfState misses a current
// member.
type raftStorage struct {
	*raftstore.Store
	j *Journal
}

func (s raftStorage) Snapshot() (*raftpb.Snapshot, error) {
	snap, err := s.Store.Snapshot()
	if err != nil || raft.IsEmptySnap(snap) {
		return snap, err
	}
	cs := snap.GetMetadata().GetConfState()
	s.j.mu.Lock()
	m := s.j.mu.membership
	s.j.mu.Unlock()
	for id := range m.Members {
		if !slices.Contains(cs.GetVoters(), id) && !slices.Contains(cs.GetLearners(), id) {
			s.j.log.Info("image predates a member; asking for a new one",
				"image", snap.GetMetadata().GetIndex(), "member", id)
			if r, ok := s.j.cfg.Snapshots.(ImageRequester); ok {
				go r.RequestImage()
			}
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
	}
	return snap, nil
}
