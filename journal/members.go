package journal

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/membership"
)

// AddMember adds node id, reachable at addr, as a voter (Follower) or a
// learner (Observer), and returns once the change is applied on this node.
// Adding a member that already exists with the same role and address is a
// no-op; with another role it fails with ErrRoleMismatch (use Promote).
// Removed ids are never reused. Any node can call it: the change goes
// through the leader.
func (j *Journal) AddMember(ctx context.Context, id uint64, addr string, role Role) error {
	return j.addMember(ctx, id, addr, role, 0)
}

// addMember is AddMember recording the newest format version the member
// reads (0: unknown). An existing member whose recorded version differs is
// updated (a membership change of its own, so every replica records it).
func (j *Journal) addMember(ctx context.Context, id uint64, addr string, role Role, maxVersion uint32) error {
	if id == 0 || addr == "" {
		return fmt.Errorf("journal: add member: id and addr are required")
	}
	if role == RoleUnset {
		role = Follower
	}
	j.mu.Lock()
	m := j.mu.membership
	j.mu.Unlock()
	if m.IsRemoved(id) {
		return operr.Errorf("journal: add member %d: %w: the id was removed and cannot be reused", id, ErrUnknownMember)
	}
	if cur, ok := m.Members[id]; ok {
		if cur.Role != role {
			return operr.Errorf("journal: add member %d: %w: it is a %s, asked for %s", id, ErrRoleMismatch, cur.Role, role)
		}
		if cur.Addr == addr {
			if maxVersion == 0 || cur.MaxVersion == maxVersion {
				return nil
			}
			return j.confChange(ctx, "update member", raftpb.ConfChangeUpdateNode, id, addr, role, maxVersion, false)
		}
	}
	typ := raftpb.ConfChangeAddNode
	if role == Observer {
		typ = raftpb.ConfChangeAddLearnerNode
	}
	return j.confChange(ctx, "add member", typ, id, addr, role, maxVersion, false)
}

// RemoveMember removes node id. A removal that would leave fewer reachable
// voters than a quorum of the remaining ones fails with ErrUnsafeRemoval
// unless force is set. Removing the last voter fails with ErrUnsafeRemoval
// even with force: the cluster could never commit again.
func (j *Journal) RemoveMember(ctx context.Context, id uint64, force bool) error {
	j.mu.Lock()
	m := j.mu.membership
	j.mu.Unlock()
	if _, ok := m.Members[id]; !ok {
		return operr.Errorf("journal: remove member %d: %w", id, ErrUnknownMember)
	}
	// Checked here too, so the change is not even forwarded; the leader
	// checks it again against raft's configuration.
	cc := &raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(id)}
	if err := checkLeavesVoters(cc, voterSet(m.Voters)); err != nil {
		return operr.Errorf("journal: remove member %d: %w", id, err)
	}
	return j.confChange(ctx, "remove member", raftpb.ConfChangeRemoveNode, id, "", RoleUnset, 0, force)
}

// Promote makes the learner (Observer) id a voter (Follower).
func (j *Journal) Promote(ctx context.Context, id uint64) error {
	j.mu.Lock()
	m := j.mu.membership
	j.mu.Unlock()
	cur, ok := m.Members[id]
	if !ok {
		return operr.Errorf("journal: promote %d: %w", id, ErrUnknownMember)
	}
	if cur.Role == Follower {
		return nil
	}
	return j.confChange(ctx, "promote", raftpb.ConfChangeAddNode, id, cur.Addr, Follower, 0, false)
}

func (j *Journal) confChange(ctx context.Context, what string, typ raftpb.ConfChangeType, id uint64, addr string, role Role, maxVersion uint32, force bool) error {
	return j.confChangeWith(ctx, what, typ, id, membership.ConfContext{Addr: addr, Role: role, MaxVersion: maxVersion}, force)
}

// confChangeWith proposes a membership change of node id carrying cctx
// (its Key is set here) and waits until it is applied.
func (j *Journal) confChangeWith(ctx context.Context, what string, typ raftpb.ConfChangeType, id uint64, cctx membership.ConfContext, force bool) error {
	key := uuid.New()
	cctx.Key = key
	cc := &raftpb.ConfChange{
		Type:    typ.Enum(),
		NodeId:  new(id),
		Context: mustJSON(cctx),
	}
	data, err := proto.Marshal(cc)
	if err != nil {
		return operr.Errorf("journal: %s %d: %w", what, id, err)
	}
	_, err = j.submit(ctx, key,
		func(uint64) *proposal { return &proposal{cc: proto.Clone(cc).(*raftpb.ConfChange), force: force} },
		ForwardRequest{Kind: ForwardConfChange, Key: key, Force: force, Data: data})
	if err != nil {
		return operr.Errorf("journal: %s %d: %w", what, id, err)
	}
	return nil
}

// TransferLeadership asks the leader (this node) to hand leadership to the
// voter `to`, and waits until `to` leads. On a non-leader it fails with
// ErrNotLeader.
func (j *Journal) TransferLeadership(ctx context.Context, to uint64) error {
	requested := false
	for {
		lc := j.Leadership()
		leader := j.leader.Load()
		switch {
		case leader == to:
			return nil
		case j.state.Load() == uint32(raft.StateLeader):
			if err := j.do(ctx, func() { j.loop.rn.TransferLeader(to) }); err != nil {
				return operr.Errorf("journal: transfer leadership to %d: %w", to, err)
			}
			requested = true
		case requested && leader == 0:
			// The election the transfer started is under way.
		default:
			return operr.Errorf("journal: transfer leadership to %d: %w", to, j.notLeaderErr())
		}
		tc, stop := j.cfg.Clock.NewTimer(j.electionTimeout())
		select {
		case <-lc:
		case <-tc: // raft aborts a transfer after an election timeout: ask again
		case <-ctx.Done():
			stop()
			return operr.Errorf("journal: transfer leadership to %d: %w", to, context.Cause(ctx))
		case <-j.done:
			stop()
			return ErrClosed
		}
		stop()
	}
}

// handleJoin is the journal's Receiver.HandleJoin (see receiver): it admits
// the joining node (through the leader) and answers with the cluster id and
// the members.
func (j *Journal) handleJoin(ctx context.Context, req *JoinRequest) (*JoinResponse, error) {
	if j.token != "" && req.Token != j.token {
		return nil, fmt.Errorf("%w: join token does not match", ErrClusterMismatch)
	}
	if req.ClusterID != "" && req.ClusterID != j.cluster() {
		return nil, fmt.Errorf("%w: the joining node expects cluster %s, this is %s", ErrClusterMismatch, req.ClusterID, j.cluster())
	}
	role := req.Role
	if role == RoleUnset {
		role = Follower
	}
	if cv, v := j.clusterVersion(), max(req.MaxVersion, OldestVersion); v < cv {
		return nil, fmt.Errorf("%w: node %d reads format versions up to %d, the cluster is at version %d: join it with a binary that reads version %d",
			ErrVersion, req.ID, v, cv, cv)
	}
	if err := j.addMember(ctx, req.ID, req.Addr, role, req.MaxVersion); err != nil {
		return nil, err
	}
	j.mu.Lock()
	members := j.mu.membership.List()
	cv := j.mu.membership.ClusterVersion()
	j.mu.Unlock()
	return &JoinResponse{ClusterID: j.cluster(), Members: members, ClusterVersion: cv}, nil
}

// checkLeavesVoters refuses a membership change raft could not apply: one of
// a type the journal does not make, or one that leaves no voter (removing
// or demoting the last one; raft panics on "removed all voters"). No force
// overrides it: a cluster without voters can never commit again. voters is
// the configuration the change applies to.
func checkLeavesVoters(cc *raftpb.ConfChange, voters map[uint64]struct{}) error {
	id := cc.GetNodeId()
	switch cc.GetType() {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeUpdateNode:
		return nil
	case raftpb.ConfChangeRemoveNode, raftpb.ConfChangeAddLearnerNode:
		if _, ok := voters[id]; !ok || len(voters) > 1 {
			return nil
		}
		what := "removing"
		if cc.GetType() == raftpb.ConfChangeAddLearnerNode {
			what = "demoting"
		}
		return fmt.Errorf("%w: %s node %d leaves no voter (it is the last one)", ErrUnsafeRemoval, what, id)
	}
	return fmt.Errorf("%w: membership change of type %d", ErrMalformed, cc.GetType())
}

// voterSet is the set of ids in voters.
func voterSet(voters []uint64) map[uint64]struct{} {
	s := make(map[uint64]struct{}, len(voters))
	for _, v := range voters {
		s[v] = struct{}{}
	}
	return s
}
