package frontend

import (
	"context"
	"errors"

	"github.com/metatree/metatree/heartbeat"
)

// pruneMembers runs while the frontend does: each time this frontend
// becomes the leader, and when a DELETE left a record behind, it removes
// the member records of frontends that are no longer raft members. Every
// path that adds a frontend makes it a raft member first and removes it
// from raft first, so in a running cluster few such records last. They
// come from before a forced recovery (the lost voters, removed through the
// log), from the old cluster of a restored image, or from a DELETE whose
// record removal could not commit (a frontend that removed itself, a
// forced removal that left no quorum). Without this /v1/members would list
// them and the leader would heartbeat them forever.
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
		if m.Kind != heartbeat.KindFrontend || raft[m.ID] {
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
