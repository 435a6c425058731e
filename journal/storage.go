package journal

import (
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/journal/internal/raftstore"
)

// ImageRequester is optionally implemented by a Snapshots hook. The journal
// calls RequestImage when raft needs to send a follower a snapshot and the
// newest image cannot serve it: the image predates the follower's
// membership, so raft on the follower would reject it. The hook should
// write a new image soon (a checkpoint on demand). The call runs on a
// goroutine the journal owns, one at a time (requests made meanwhile
// coalesce into one call), and Close waits for it: it must return promptly.
type ImageRequester interface {
	RequestImage()
}

// raftStorage is the raft.Storage the RawNode reads: the Pebble store, with
// Snapshot refusing (temporarily) an image whose ConfState misses a current
// member, and InitialState giving the ConfState of the state the node
// restarts from.
type raftStorage struct {
	*raftstore.Store
	j *Journal
	// conf is the ConfState as of the index the state machine was loaded
	// at (raft's Applied at restart): raft re-applies the conf changes
	// after it.
	conf *raftpb.ConfState
}

// InitialState implements raft.Storage: the durable HardState, and the
// ConfState as of the loaded state rather than as of the store's snapshot
// (the state may come from an older image, see Journal.restartPoint).
func (s raftStorage) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	hs, _, err := s.Store.InitialState()
	if err != nil {
		return nil, nil, err
	}
	return hs, raftpb.EnsureConfState(proto.Clone(s.conf).(*raftpb.ConfState)), nil
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
			s.j.requestImage()
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
	}
	return snap, nil
}

// requestImage asks the ImageRequester hook for a new image without
// blocking the caller (raft, on the loop): the request goes to
// requestImages, and one already pending covers it.
func (j *Journal) requestImage() {
	select {
	case j.imageReqc <- struct{}{}:
	default:
	}
}

// requestImages is the goroutine that calls the ImageRequester hook; it
// runs while the journal is open (only when the hook implements it).
func (j *Journal) requestImages(r ImageRequester) {
	for {
		select {
		case <-j.stopc:
			return
		case <-j.imageReqc:
			r.RequestImage()
		}
	}
}

// FetchReleaser is optionally implemented by a Snapshots hook. The journal
// calls ReleaseFetched(index) when raft did not take the snapshot at index
// that Fetch made durable for it (raft ignored the message: it has that
// index committed already, or the message is of an older term), or the
// message never reached raft (the node is closing): no Install for index
// follows, so the hook can drop what it keeps for it (a pin, the state it
// decoded during the download). It is called on the raft loop (or on the
// goroutine delivering the message) and must not block.
type FetchReleaser interface {
	ReleaseFetched(index uint64)
}

// releaseFetched tells the hook that the fetched image at index will not
// be installed.
func (j *Journal) releaseFetched(index uint64) {
	if r, ok := j.cfg.Snapshots.(FetchReleaser); ok {
		j.log.Info("raft did not take the fetched image; releasing it", "image", index)
		r.ReleaseFetched(index)
	}
}

// settleFetched is called with each Ready (loop goroutine): the snapshots
// stepped since the last one that raft took are in it; the others were
// ignored, and their images are released.
func (j *Journal) settleFetched(taken *raftpb.Snapshot) {
	for _, idx := range j.loop.steppedSnaps {
		if raft.IsEmptySnap(taken) || taken.GetMetadata().GetIndex() != idx {
			j.releaseFetched(idx)
		}
	}
	j.loop.steppedSnaps = j.loop.steppedSnaps[:0]
}
