package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/membership"
)

// Format versions and the cluster version.
//
// Every member reads and writes the format versions 1 to its
// Config.MaxVersion, and advertises that maximum when it joins (in the
// membership change that admits it, so the whole cluster knows it by
// replay). The leader journals the cluster version: the highest version
// every voter and observer reads, raised (never lowered) by a envelope.KindVersion
// entry once all of them do. Writers read it from Status.ClusterVersion and
// write no newer format, so that every member can read every entry. The
// leader refuses a member that reads less than the cluster version or a
// raise it proposed and that has not applied yet; at apply, every replica
// refuses alike (by the membership the entry applies to) a change that
// admits a member below the cluster version and a raise above what a
// member reads, whichever of the two reached the log first.
//
// A member that meets an entry it cannot read (a newer envelope kind, a
// state-machine entry whose Apply result halts, a cluster version above its
// own) stops its applier there with a *HaltError rather than skip it: a
// replica that skipped an entry the others applied would diverge for good.
// It keeps serving what it holds (stale by the usual guard); a restart with
// a binary that reads the format resumes at that entry.

const (
	// NewestVersion is the newest format version this code reads and
	// writes: version 2 carries catalog batches that use catalog.Cond.Match,
	// version 3 the consistency checks' entries (check.go), version 4
	// catalog batches that name an owner (catalog.Op.Owner, batch format
	// 3), version 5 the check marks that name a digest format, and the
	// catalog digest of format 2 (catalog.DigestV2) at them, version 6
	// catalog batches of format 4 (encoded as format 3, and the only ones
	// catalog.Quota.Exempt exempts: the cluster's member records pass a
	// full catalog). The journal itself reads every version alike but for
	// the marks: a version that only the state machine reads is for
	// writers to gate on.
	NewestVersion = 6
	// OldestVersion is the oldest format version this code reads and writes.
	OldestVersion = envelope.OldestVersion
)

// Halter is implemented by an Apply result that can say the state machine
// could not apply the entry at all, because this binary cannot read it (a
// format version it does not know). A non-nil Halt stops the applier before
// the entry: the journal neither marks it applied nor applies anything
// after it. A result whose Halt is nil (or that is no Halter) is the
// entry's outcome, failed or not, the same on every replica.
type Halter interface {
	Halt() error
}

// HaltError is the error that stopped the applier at Index: what it could
// not read (an "entry", a "batch", a "cluster version"), and in which
// version. errors.Is(err, ErrHalted) holds, and so does errors.Is for the
// state machine's own cause (catalog.ErrUnknownVersion).
type HaltError struct {
	Index   uint64
	What    string
	Version int // 0: the state machine did not say
	Err     error
}

func (e *HaltError) Error() string {
	v := ""
	if e.Version != 0 {
		v = fmt.Sprintf(" of version %d", e.Version)
	}
	return fmt.Sprintf("journal: applier halted at index %d: cannot read the %s%s: %v; nothing from index %d on applies here: a restart with a binary that reads this entry resumes there; no binary reads one that no version wrote (data proposed to a state machine that checks no proposals, see ProposalChecker)",
		e.Index, e.What, v, e.Err, e.Index)
}

func (e *HaltError) Unwrap() []error { return []error{ErrHalted, e.Err} }

func isVersionEntry(e *raftpb.Entry) bool {
	d := e.GetData()
	return e.GetType() == raftpb.EntryNormal && len(d) > 0 && d[0] == envelope.KindVersion
}

// supportedVersion is the highest version every member reads: the version the
// leader raises the cluster to. A member that did not advertise its
// maximum (one added by AddMember before it ever started) counts as
// reading only the oldest.
func supportedVersion(m *membership.Membership) uint32 {
	v := uint32(NewestVersion)
	ids := append(slices.Clone(m.Voters), m.Learner...)
	for _, id := range ids {
		v = min(v, max(m.Members[id].MaxVersion, OldestVersion))
	}
	return v
}

// applyVersionEntry handles a committed envelope.KindVersion entry on the raft loop,
// in log order with the membership changes: the membership after it (with
// the raised version) is published and recorded like a membership change's.
// A version above what a member reads, by the membership the entry applies
// to, is refused (a no-op, on every replica alike); else a version above
// this node's maximum halts the applier at that entry.
func (j *Journal) applyVersionEntry(e *raftpb.Entry) memberRecord {
	rec := memberRecord{index: e.GetIndex()}
	v, err := envelope.DecodeVersion(e.GetData())
	if err != nil {
		j.log.Error("malformed version entry ignored", "index", e.GetIndex(), "err", err)
		return rec
	}
	cur := j.loop.confBase
	if v <= cur.ClusterVersion() {
		return rec
	}
	if s := supportedVersion(cur); v > s {
		// The raise was proposed before a member that reads less was
		// admitted (or the entry bypassed the leader): raising would
		// leave that member unable to apply anything after it. Every
		// replica decides it alike, from the membership before the entry.
		j.log.Warn("cluster version raise refused: a member reads less", "index", e.GetIndex(), "version", v, "members_read", s)
		return rec
	}
	if v > j.cfg.MaxVersion {
		rec.halt = &HaltError{Index: e.GetIndex(), What: "cluster version", Version: int(v),
			Err: fmt.Errorf("%w: this node reads versions up to %d", ErrUnknownVersion, j.cfg.MaxVersion)}
		return rec
	}
	m := cur.Clone()
	m.Index = e.GetIndex()
	m.Version = v
	j.advanceMembership(m)
	rec.m = m
	j.log.Info("cluster version raised", "index", e.GetIndex(), "version", v)
	return rec
}

// maybeRaiseVersion is the leader's part, on the raft loop: propose the
// version every member reads once it is above the cluster's. A duplicate
// proposal (the previous one not yet applied) commits as a no-op.
func (j *Journal) maybeRaiseVersion() {
	if j.state.Load() != uint32(raft.StateLeader) {
		return
	}
	j.mu.Lock()
	m := j.mu.membership
	j.mu.Unlock()
	if v := min(supportedVersion(m), j.cfg.MaxVersion); v > m.ClusterVersion() {
		// A dropped proposal is retried with the next timestamp. A taken
		// one gets its index in the next Ready (notePendingVersions); it
		// comes after every entry appended so far.
		if j.loop.rn.Propose(envelope.EncodeVersion(v)) == nil {
			j.notePendingVersion(v, j.loop.lastIndex+1)
		}
	}
}

// notePendingVersion records, on the raft loop, a version entry raising to
// v at index (for one proposed and not yet in a Ready, the lowest index it
// can have) that is not applied yet.
func (j *Journal) notePendingVersion(v uint32, index uint64) {
	if v > j.loop.pendingVersion || (v == j.loop.pendingVersion && index > j.loop.pendingVersionAt) {
		j.loop.pendingVersion, j.loop.pendingVersionAt = v, index
	}
}

// notePendingVersions records the version entries among the entries a
// Ready appends: those this leader proposed (their index now known) and
// those a leader sent.
func (j *Journal) notePendingVersions(ents []*raftpb.Entry) {
	for _, e := range ents {
		if isVersionEntry(e) {
			if v, err := envelope.DecodeVersion(e.GetData()); err == nil {
				j.notePendingVersion(v, e.GetIndex())
			}
		}
	}
}

// settlePendingVersion forgets the pending version once the entries handed
// to the applier reach its index: the entry there raised the cluster
// version, was refused, or was another entry (the raise was overwritten).
func (j *Journal) settlePendingVersion(handedOff uint64) {
	if j.loop.pendingVersion != 0 && handedOff >= j.loop.pendingVersionAt {
		j.loop.pendingVersion, j.loop.pendingVersionAt = 0, 0
	}
}

// comingVersion is, on the raft loop, the highest cluster version in force
// or on its way: the one every change handed to the applier leaves, the
// published one, and the one a version entry not yet applied raises to.
func (j *Journal) comingVersion() uint32 {
	return max(j.loop.confBase.ClusterVersion(), j.clusterVersion(), j.loop.pendingVersion)
}

// checkMemberVersion refuses a membership change that admits a member, or
// records its format version, below the cluster version cv: such a member
// could not apply the entries written at cv. A change that does not say
// the member's version (AddMember, Promote) is not refused.
func checkMemberVersion(cc *raftpb.ConfChange, ctx membership.ConfContext, cv uint32) error {
	switch cc.GetType() {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode, raftpb.ConfChangeUpdateNode:
	default:
		return nil
	}
	if ctx.MaxVersion == 0 || ctx.MaxVersion >= cv {
		return nil
	}
	return fmt.Errorf("%w: node %d reads format versions up to %d, the cluster is at (or raising to) version %d: join it with a binary that reads version %d",
		ErrVersion, cc.GetNodeId(), ctx.MaxVersion, cv, cv)
}

// checkVersion refuses to run this binary on a cluster whose version it
// cannot read (a downgrade below the cluster version).
func (j *Journal) checkVersion(m *membership.Membership, where string) error {
	if cv := m.ClusterVersion(); cv > j.cfg.MaxVersion {
		return operr.Errorf("journal: %s: %w: the cluster is at format version %d and this node reads versions up to %d; run a binary that reads version %d (a cluster version never goes down)",
			where, ErrVersion, cv, j.cfg.MaxVersion, cv)
	}
	return nil
}

// halted is the *HaltError that stopped the applier, or nil.
func (j *Journal) halted() *HaltError {
	var h *HaltError
	if e := j.failed.Load(); e != nil && errors.As(*e, &h) {
		return h
	}
	return nil
}

// clusterVersion is the cluster version of the published membership.
func (j *Journal) clusterVersion() uint32 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.membership.ClusterVersion()
}

// ClusterVersion is the cluster's format version as this node knows it
// (Status.ClusterVersion, without building the rest of the status): the
// newest format a writer may write. It only rises.
func (j *Journal) ClusterVersion() uint32 { return j.clusterVersion() }

// advertiseVersion records this node's Config.MaxVersion in the membership
// when the record differs, as after a restart with a newer (or older)
// binary: a membership change of its own, retried after each applied
// batch or change of leader until it is applied, the node is no member, or
// the journal closes. It runs on its own goroutine, which Close waits for.
func (j *Journal) advertiseVersion() {
	ctx, cancel := j.untilStop(context.Background(), 0)
	defer cancel()
	for {
		j.mu.Lock()
		self, member := j.mu.membership.Members[j.id]
		applied := j.mu.appliedCh
		j.mu.Unlock()
		if !member || self.MaxVersion == j.cfg.MaxVersion || j.failed.Load() != nil {
			return
		}
		leadership := j.Leadership()
		err := j.confChange(ctx, "advertise format version", raftpb.ConfChangeUpdateNode, j.id, self.Addr, self.Role, j.cfg.MaxVersion, false)
		if err == nil {
			j.log.Info("format version advertised", "max_version", j.cfg.MaxVersion)
			return
		}
		j.log.Debug("advertise format version", "err", err)
		select {
		case <-applied:
		case <-leadership:
		case <-ctx.Done():
			return
		}
	}
}

// WaitClusterVersion waits until the cluster version this node knows is at
// least v: a host that gates a feature of format v on it (writes of that
// format) can wait for the raise instead of polling Status.
func (j *Journal) WaitClusterVersion(ctx context.Context, v uint32) error {
	for {
		j.mu.Lock()
		cv, ch := j.mu.membership.ClusterVersion(), j.mu.appliedCh
		j.mu.Unlock()
		if cv >= v {
			return nil
		}
		if j.failed.Load() != nil {
			return j.loopErr()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return operr.Errorf("journal: wait for cluster version %d (at %d): %w", v, cv, context.Cause(ctx))
		case <-j.done:
			return ErrClosed
		}
	}
}
