package journal

import (
	"encoding/json"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/membership"
)

// Membership changes on the raft loop: the checks before a change is
// proposed, raft's ApplyConfChange as the change commits, and the
// transport's peers that follow the membership.

// checkConfChange refuses a change raft could not apply (checkLeavesVoters,
// whatever force says), a member that could not read the cluster version
// in force or on its way (checkMemberVersion), and, unless forced, a
// removal that leaves fewer reachable voters than a quorum of the new
// configuration.
func (j *Journal) checkConfChange(cc *raftpb.ConfChange, force bool) error {
	if err := j.checkPromote(cc); err != nil {
		return err
	}
	st := j.loop.rn.Status()
	voters := st.Config.Voters.IDs()
	if err := checkLeavesVoters(cc, voters); err != nil {
		return err
	}
	// A member that could not read the cluster version, or the raise in
	// flight, is refused here with a clear error (and at apply, where
	// every replica refuses it alike, if it got past).
	var cctx membership.ConfContext
	if len(cc.GetContext()) > 0 {
		if err := json.Unmarshal(cc.GetContext(), &cctx); err != nil {
			return fmt.Errorf("%w: conf change context: %w", ErrMalformed, err)
		}
	}
	if err := checkMemberVersion(cc, cctx, j.comingVersion()); err != nil {
		return err
	}
	if cc.GetType() != raftpb.ConfChangeRemoveNode || force {
		return nil
	}
	id := cc.GetNodeId()
	if _, ok := voters[id]; !ok {
		return nil // a learner: no quorum impact
	}
	remaining, reachable := 0, 0
	for v := range voters {
		if v == id {
			continue
		}
		remaining++
		if v == j.id || j.reachable(v) {
			reachable++
		}
	}
	if reachable < remaining/2+1 {
		return fmt.Errorf("%w: removing node %d leaves %d reachable of %d voters, below a quorum", ErrUnsafeRemoval, id, reachable, remaining)
	}
	return nil
}

// reachable reports whether a message from peer id arrived within the
// last ElectionTicks of this node's raft ticks (a leader heartbeats every
// HeartbeatTicks of them). raft's Progress.RecentActive is not used: the
// leader clears it for every peer at each check-quorum round, so for up to
// a heartbeat after one a healthy peer would look unreachable and a safe
// removal be refused. The window is counted in the ticks that drive the
// heartbeats, not in clock time: a leader whose loop stalled (a GC pause,
// a starved CPU) sent no heartbeat meanwhile and so heard no answer, and
// its peers are no less reachable for it; check quorum counts in the same
// ticks.
func (j *Journal) reachable(id uint64) bool {
	t, ok := j.loop.heard[id]
	return ok && j.loop.ticks-t <= uint64(j.cfg.ElectionTicks)
}

// forgetRemovedPeers drops the peers that membership changes removed from
// the transport, once the messages raft addressed to them in the same
// Ready were sent (the transport still delivers what it has queued). Not
// at the change itself: that Ready carries the append that commits the
// removed node's own removal, and without it a reachable removed node
// would never learn of it.
func (j *Journal) forgetRemovedPeers() {
	for _, id := range j.loop.removedPeers {
		j.tr.RemovePeer(id)
	}
	j.loop.removedPeers = j.loop.removedPeers[:0]
}

// checkConfQueue matches the membership changes this leader proposed with
// the entries raft appended for them. raft silently replaces a conf change
// proposed while another one is unapplied with an empty entry; its proposer
// is told ErrBusy (it retries once entries apply) instead of waiting for an
// entry that will never come.
func (j *Journal) checkConfQueue(ents []*raftpb.Entry) {
	for _, e := range ents {
		if len(j.loop.confQueue) == 0 {
			return
		}
		switch {
		case e.GetType() == raftpb.EntryConfChange || e.GetType() == raftpb.EntryConfChangeV2:
			j.loop.confQueue = j.loop.confQueue[1:]
		case len(e.GetData()) == 0:
			key := j.loop.confQueue[0]
			j.loop.confQueue = j.loop.confQueue[1:]
			j.resolve(key, applyResult{err: fmt.Errorf("%w: another membership change is pending", ErrBusy)})
		}
	}
}

// memberRecord is what the applier makes durable at a membership change's
// index: the membership after it, or (m nil) nothing, with err for the
// change's proposer when the change was refused.
type memberRecord struct {
	index uint64
	m     *membership.Membership
	key   [16]byte
	err   error
	halt  *HaltError // the entry cannot be read here: the applier stops at it
}

// applyConfChange applies a committed membership change to raft and
// publishes the membership after it (peer addresses travel in the conf
// change's context); the record returned is for the applier.
func (j *Journal) applyConfChange(e *raftpb.Entry) memberRecord {
	rec := memberRecord{index: e.GetIndex()}
	cc, ctx, err := membership.DecodeConfChange(e)
	if err != nil {
		// Deterministic on every replica; raft still needs to hear about
		// it, as a no-op change.
		j.log.Error("malformed conf change ignored", "index", e.GetIndex(), "err", err)
		j.loop.rn.ApplyConfChange(&raftpb.ConfChange{})
		return rec
	}
	rec.key = ctx.Key
	// A change that leaves no voter is in the log only if it bypassed the
	// proposal checks (a forged append, a log written without them): raft would panic
	// on it, here and at every restart. Every replica refuses it alike, as
	// a no-op change.
	if err := checkLeavesVoters(cc, j.loop.rn.Status().Config.Voters.IDs()); err != nil {
		j.log.Error("membership change refused at apply", "index", e.GetIndex(), "err", err)
		j.loop.rn.ApplyConfChange(&raftpb.ConfChange{})
		rec.err = operr.Errorf("journal: membership change at %d refused: %w", e.GetIndex(), err)
		return rec
	}
	// A member below the cluster version (admitted while a raise was in
	// flight, or by a leader that had not seen the raise) is refused
	// alike on every replica, by the membership the change applies to.
	if err := checkMemberVersion(cc, ctx, j.loop.confBase.ClusterVersion()); err != nil {
		j.log.Error("membership change refused at apply", "index", e.GetIndex(), "err", err)
		j.loop.rn.ApplyConfChange(&raftpb.ConfChange{})
		rec.err = operr.Errorf("journal: membership change at %d refused: %w", e.GetIndex(), err)
		return rec
	}
	cs := j.loop.rn.ApplyConfChange(cc)
	m := j.loop.confBase.Clone()
	m.Apply(e.GetIndex(), cc, ctx, cs)
	j.advanceMembership(m)
	rec.m = m
	return rec
}

// advanceMembership makes m, the membership after a change at m.Index, the
// base of the next change, and publishes it unless the published
// membership is newer: a restart replaying the log from an older image
// rebuilds the records of the changes it already knows (their records are
// rewritten with the same content) without taking the published view back.
func (j *Journal) advanceMembership(m *membership.Membership) {
	j.loop.confBase = m
	j.mu.Lock()
	newer := j.mu.membership.Index > m.Index
	j.mu.Unlock()
	if !newer {
		j.setMembership(m)
	}
}

// setMembership publishes m and updates the transport's peers (no disk:
// the applier makes it durable, persistMembership). Only the peers m
// records as removed leave the transport: a member m does not list yet
// (the members a joining node was told of, before it replayed their
// additions) stays reachable.
func (j *Journal) setMembership(m *membership.Membership) {
	j.mu.Lock()
	old := j.mu.membership
	j.mu.membership = m
	j.settleLearned(m)
	j.mu.Unlock()
	for id := range old.Members {
		if _, ok := m.Members[id]; !ok && id != j.id && m.IsRemoved(id) {
			// After this Ready's messages are sent: they include the
			// append that tells the removed node its removal committed.
			j.loop.removedPeers = append(j.loop.removedPeers, id)
		}
	}
	for id, mem := range m.Members {
		if id != j.id && mem.Addr != "" && old.Members[id].Addr != mem.Addr {
			j.tr.SetPeer(id, mem.Addr)
		}
	}
	if _, ok := m.Members[j.id]; !ok && m.IsRemoved(j.id) && !j.removed.Swap(true) {
		j.log.Warn("this node applied its removal from the cluster", "index", m.Index)
		j.notifyChanged()
	}
}
