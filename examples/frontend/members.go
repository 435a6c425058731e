package frontend

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/journal"
)

// AddMember adds a member to the cluster: a frontend becomes a raft
// member first (journal.AddMember, with m.Role "follower" or "observer";
// it then starts with Config.Join), then every member gets its record,
// which the leader heartbeats. Adding a worker adds its record only.
func (f *Frontend) AddMember(ctx context.Context, m heartbeat.Member) error {
	if m.ID == 0 {
		return fmt.Errorf("%w: a member needs a non-zero id", heartbeat.ErrInvalid)
	}
	if _, port, err := net.SplitHostPort(m.Addr); err != nil || port == "" {
		return fmt.Errorf("%w: addr %q: want host:port", heartbeat.ErrInvalid, m.Addr)
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RequestTimeout)
	defer cancel()
	if m.Kind == epoch.KindFrontend {
		role := journal.Follower
		switch m.Role {
		case "", "follower":
		case "observer":
			role = journal.Observer
		default:
			return fmt.Errorf("%w: role %q: want follower or observer", heartbeat.ErrInvalid, m.Role)
		}
		if err := f.journal.AddMember(ctx, m.ID, m.Addr, role); err != nil {
			return err
		}
	}
	return f.members.Add(ctx, m)
}

// RemoveMember removes member id from the cluster: a frontend leaves raft
// first (journal.RemoveMember, force as there), then its record goes. A
// frontend already out of raft (an earlier removal that ended between the
// two) has only its record left to remove. When the frontend is out of
// raft but its record cannot be removed now (this frontend removed itself
// and can no longer write, or a forced removal left no quorum), the error
// wraps ErrRecordLeft: the removal happened, and the next leader removes
// the record. An unknown member is heartbeat.ErrNotFound.
func (f *Frontend) RemoveMember(ctx context.Context, id uint64, force bool) error {
	// Heartbeat's view follows the tree on a watcher: a record just added
	// is in the tree first, and a frontend is in raft before its record.
	m, known := f.members.Member(id)
	_, recorded := f.tree.Get(heartbeat.MemberPath(id))
	inRaft := false
	for _, rm := range f.journal.Status().Members {
		inRaft = inRaft || rm.ID == id
	}
	if !known && !recorded && !inRaft {
		return fmt.Errorf("%w: no member %d", heartbeat.ErrNotFound, id)
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RequestTimeout)
	defer cancel()
	if !inRaft && m.Kind != epoch.KindFrontend {
		return f.members.Remove(ctx, id)
	}
	// Raft first, then the record (see pruneMembers).
	err := f.journal.RemoveMember(ctx, id, force)
	if err != nil && !errors.Is(err, journal.ErrUnknownMember) {
		return err
	}
	if err := f.members.Remove(ctx, id); err != nil {
		f.logger.Warn("removed a frontend from raft; its member record is left for the next leader", "member", id, "err", err)
		select {
		case f.pruneAgain <- struct{}{}:
		default:
		}
		return fmt.Errorf("%w: %w", ErrRecordLeft, err)
	}
	return nil
}

// pruneMembers runs while the frontend does: each time this frontend
// becomes the leader, and when a removal left a record behind, it removes
// the member records of frontends that are no longer raft members. Every
// path that adds a frontend makes it a raft member first and removes it
// from raft first, so in a running cluster few such records last. They
// come from before a forced recovery (the lost voters, removed through the
// log), from the old cluster of a restored image, or from a removal whose
// record removal could not commit (a frontend that removed itself, a
// forced removal that left no quorum). Without this the member list would
// hold them and the leader would heartbeat them forever.
func (f *Frontend) pruneMembers() {
	for {
		ch := f.journal.Leadership()
		if f.journal.Status().IsLeader() {
			f.pruneOnce()
		}
		select {
		case <-ch:
		case <-f.pruneAgain:
		case <-f.bgCtx.Done():
			return
		}
	}
}

func (f *Frontend) pruneOnce() {
	// A new leader may not have applied every entry committed before its
	// term, such as the removal of the leader before it: the barrier waits
	// for them.
	ctx, cancel := context.WithTimeout(f.bgCtx, f.cfg.RequestTimeout)
	err := f.journal.ReadBarrier(ctx)
	cancel()
	if err != nil {
		f.logger.Warn("could not catch up to prune the member records of removed frontends", "err", err)
		return
	}
	// Records first, then the raft membership: a record added meanwhile
	// follows its raft member's addition in the log, so the membership
	// read after it includes that member.
	records := f.members.Members()
	raft := map[uint64]bool{}
	for _, m := range f.journal.Status().Members {
		raft[m.ID] = true
	}
	for _, m := range records {
		if m.Kind != epoch.KindFrontend || raft[m.ID] {
			continue
		}
		ctx, cancel := context.WithTimeout(f.bgCtx, f.cfg.RequestTimeout)
		err := f.members.Remove(ctx, m.ID)
		cancel()
		switch {
		case err == nil:
			f.logger.Info("removed the record of a frontend that is no longer a raft member", "member", m.ID, "addr", m.Addr)
		case errors.Is(err, heartbeat.ErrNotFound):
		default:
			f.logger.Warn("could not remove the record of a frontend that is no longer a raft member", "member", m.ID, "err", err)
		}
	}
}
