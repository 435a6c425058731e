package journal

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/metatree/metatree/internal/operr"
)

// Progress is the leader's view of one member's replication: how much of
// the log the leader knows the member holds, and how far it trails.
type Progress struct {
	ID   uint64
	Role Role
	// Match is the highest log index the leader knows the member holds
	// durably (for the leader itself, its last index).
	Match uint64
	// Lag is how many entries the member trails the leader's last index.
	Lag uint64
	// Active is raft's RecentActive: the member was heard from within the
	// last election timeout.
	Active bool
	// Snapshot is true while the member is being sent an image.
	Snapshot bool
}

// Progress returns the leader's view of every member's replication, in id
// order. It fails with ErrNotLeader on a node that does not lead (only the
// leader tracks its followers).
func (j *Journal) Progress(ctx context.Context) ([]Progress, error) {
	var out []Progress
	err := j.do(ctx, func() {
		st := j.loop.rn.Status()
		if st.RaftState != raft.StateLeader {
			return
		}
		out = progressOf(st)
	})
	if err != nil {
		return nil, operr.Errorf("journal: progress: %w", err)
	}
	if out == nil {
		return nil, operr.Errorf("journal: progress: %w", j.notLeaderErr())
	}
	return out, nil
}

// progressOf turns raft's status on the leader into Progress entries.
func progressOf(st raft.Status) []Progress {
	last := st.Progress[st.ID].Match
	out := make([]Progress, 0, len(st.Progress))
	for id, pr := range st.Progress {
		p := Progress{ID: id, Role: Follower, Match: pr.Match, Active: pr.RecentActive || id == st.ID,
			Snapshot: pr.State == tracker.StateSnapshot}
		if pr.IsLearner {
			p.Role = Observer
		}
		if last > pr.Match {
			p.Lag = last - pr.Match
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Progress) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// checkPromote refuses to promote a learner that trails the leader's log
// by more than Config.PromoteMaxLag entries (loop goroutine, on the
// leader): as a voter it would count towards quorums it cannot yet help
// reach.
func (j *Journal) checkPromote(cc *raftpb.ConfChange) error {
	if cc.GetType() != raftpb.ConfChangeAddNode {
		return nil
	}
	st := j.loop.rn.Status()
	pr, ok := st.Progress[cc.GetNodeId()]
	if !ok || !pr.IsLearner || st.RaftState != raft.StateLeader {
		return nil
	}
	last := st.Progress[j.id].Match
	if last > pr.Match && last-pr.Match > j.cfg.PromoteMaxLag {
		return fmt.Errorf("%w: observer %d holds index %d, the leader %d: %d entries behind (Config.PromoteMaxLag %d)",
			ErrNotCaughtUp, cc.GetNodeId(), pr.Match, last, last-pr.Match, j.cfg.PromoteMaxLag)
	}
	return nil
}
