package journal

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/google/uuid"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/membership"
	"github.com/metatree/metatree/journal/internal/raftstore"
)

// forceNewCluster rewrites the membership of a surviving voter's log to
// itself alone (Config.ForceNewCluster), as etcd's --force-new-cluster
// does, but keeping the log's uncommitted tail: the others are gone, so
// nothing can conflict with it, and a write the lost leader acknowledged
// may be there. The tail's membership changes that remove this node or
// demote it to a learner are the exception: they become empty entries
// (same index and term), so that the node the recovery makes the only
// voter stays one whatever the tail holds.
//
// One synced Pebble batch rewrites those entries (and, as raft's storage
// requires, every entry after the first of them), appends at the
// HardState's term a ConfChangeRemoveNode for every other node that the
// membership or any conf change in the log names, and raises the durable
// commit to the last of them. Before that write the dir is as it was (a crash leaves it to be
// forced again); after it, everything follows from the log: raft restarts
// from the loaded image with the membership as of it, the applier replays
// the committed entries (the removals among them: MEMBERS, ROLE and the
// removed ids are updated as for any change), and the node, now the only
// voter, elects itself. From the start of Open until those removals are
// handed to the applier, Receive refuses every other node with ErrRemoved
// (Journal.fenceUntil): an old member that comes back with the cluster's
// id and token can neither raise the node's term, take its vote nor
// append to its log before the log has removed it.
func (j *Journal) forceNewCluster(haveVersion bool) error {
	if !haveVersion {
		return fmt.Errorf("journal: force a new cluster: %s holds no VERSION file: only an existing member's data dir can be forced", j.cfg.Dir)
	}
	if Role(j.role.Load()) != Follower {
		return operr.Errorf("journal: force a new cluster: %w: node %d is an observer (a learner); only a voter's data dir can be forced", ErrRoleMismatch, j.id)
	}
	m, err := j.newestMembership()
	if err != nil {
		return operr.Errorf("journal: force a new cluster: %w", err)
	}
	if m.IsRemoved(j.id) {
		return fmt.Errorf("journal: force a new cluster: node %d was removed from the cluster", j.id)
	}
	others := map[uint64]bool{}
	for id := range m.Members {
		others[id] = true
	}
	for _, id := range slices.Concat(m.Voters, m.Learner) {
		others[id] = true
	}
	first, err := j.store.FirstIndex()
	if err != nil {
		return operr.Errorf("journal: force a new cluster: %w", err)
	}
	last, err := j.store.LastIndex()
	if err != nil {
		return operr.Errorf("journal: force a new cluster: %w", err)
	}
	lastTerm, err := j.store.Term(last)
	if err != nil {
		return operr.Errorf("journal: force a new cluster: term of the last entry %d: %w", last, err)
	}
	// Nodes the log adds after the membership record (an uncommitted or
	// unapplied tail) are removed as well. A change in that tail that
	// removes this node or demotes it to a learner is replaced by an empty
	// entry: replayed, it would leave the node outside the configuration
	// it is forced to lead, and the removals appended after it would then
	// take out the other voters instead (etcd's --force-new-cluster drops
	// the uncommitted tail for the same reason).
	var tail []*raftpb.Entry // from the first replaced entry to last
	for lo := max(first, m.Index+1); lo <= last; {
		ents, err := j.store.Entries(lo, last+1, 4<<20)
		if err != nil {
			return operr.Errorf("journal: force a new cluster: read entries from %d: %w", lo, err)
		}
		for _, e := range ents {
			keep := e
			if e.GetType() == raftpb.EntryConfChange {
				cc, _, err := membership.DecodeConfChange(e)
				switch {
				case err != nil:
				case dropsVoter(cc, j.id):
					j.log.Warn("force new cluster: the log's tail removes or demotes this node; the entry is replaced by an empty one",
						"index", e.GetIndex(), "change", cc.GetType().String())
					keep = &raftpb.Entry{Type: raftpb.EntryNormal.Enum(), Term: new(e.GetTerm()), Index: new(e.GetIndex())}
				case cc.GetType() != raftpb.ConfChangeRemoveNode:
					others[cc.GetNodeId()] = true
				}
			}
			if tail != nil || keep != e {
				tail = append(tail, keep)
			}
		}
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	delete(others, j.id)
	if len(others) == 0 && tail == nil {
		j.log.Info("force new cluster: this node is the only member already; nothing to change")
		j.fenceUntil.Store(0)
		return nil
	}
	ids := make([]uint64, 0, len(others))
	for id := range others {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	hs := j.store.HardState()
	term := max(hs.GetTerm(), lastTerm)
	ents := tail
	for k, id := range ids {
		data, err := proto.Marshal(&raftpb.ConfChange{
			Type:    raftpb.ConfChangeRemoveNode.Enum(),
			NodeId:  new(id),
			Context: mustJSON(membership.ConfContext{Key: uuid.New()}),
		})
		if err != nil {
			return operr.Errorf("journal: force a new cluster: %w", err)
		}
		ents = append(ents, &raftpb.Entry{
			Type: raftpb.EntryConfChange.Enum(), Term: new(term), Index: new(last + 1 + uint64(k)), Data: data,
		})
	}
	newHS := &raftpb.HardState{Term: new(term), Vote: new(hs.GetVote()), Commit: new(last + uint64(len(ids)))}
	if err := j.store.Append(newHS, ents, nil, true); err != nil {
		return operr.Errorf("journal: force a new cluster: write the removals: %w", err)
	}
	// Until the last removal is handed to the applier, the membership
	// raft and Receive see still names the old members: Receive refuses
	// every sender until then (Journal.fenceUntil).
	if len(ids) == 0 {
		j.fenceUntil.Store(0)
	} else {
		j.fenceUntil.Store(newHS.GetCommit())
	}
	j.log.Warn("forced a new cluster: every other member is removed through the log; this node is the only voter",
		"removed", ids, "from_index", last+1, "replaced_from", replacedFrom(tail), "commit", newHS.GetCommit(), "uncommitted_kept", last-min(last, hs.GetCommit()))
	return nil
}

// passFence lifts the fence (Journal.fenceUntil) once the committed
// entries up to its index are handed to the applier: their membership
// changes are applied to raft and published (handOff), so the removals a
// forced recovery appended list the old members as removed, and members
// added later are heard. The loop calls it.
func (j *Journal) passFence(handed uint64) {
	if until := j.fenceUntil.Load(); until != 0 && handed >= until {
		j.fenceUntil.Store(0)
		j.log.Info("force new cluster: the removals of the old members are applied; other members are heard again", "index", handed)
	}
}

// newestMembership is the membership loadState will start from: the
// newest of the log's records and the MEMBERS file, else the one raft's
// snapshot carries.
func (j *Journal) newestMembership() (*membership.Membership, error) {
	m := membership.New()
	if blob, err := j.store.MembershipAt(math.MaxUint64); err == nil {
		if m, err = membership.Decode(blob); err != nil {
			return nil, fmt.Errorf("stored membership: %w", err)
		}
	} else if !errors.Is(err, raftstore.ErrNoMembership) {
		return nil, fmt.Errorf("stored membership: %w", err)
	}
	file, err := j.readMembers()
	if err != nil {
		return nil, err
	}
	if file != nil && file.Index > m.Index {
		m = file
	}
	if snap, err := j.store.Snapshot(); err == nil && snap.GetMetadata().GetIndex() > m.Index {
		if sm, err := membership.Decode(snap.GetData()); err == nil {
			m = sm
		}
	}
	return m, nil
}

// dropsVoter reports whether cc takes voter id out of the voters: its
// removal, or its demotion to a learner.
func dropsVoter(cc *raftpb.ConfChange, id uint64) bool {
	t := cc.GetType()
	return cc.GetNodeId() == id && (t == raftpb.ConfChangeRemoveNode || t == raftpb.ConfChangeAddLearnerNode)
}

// replacedFrom is the index of the first rewritten entry of the tail, 0
// when none was.
func replacedFrom(tail []*raftpb.Entry) uint64 {
	if len(tail) == 0 {
		return 0
	}
	return tail[0].GetIndex()
}
