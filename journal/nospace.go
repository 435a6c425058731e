package journal

import (
	"context"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal/internal/diskguard"
	"github.com/metatree/metatree/journal/internal/membership"
)

// The no-space alarm, as etcd's NOSPACE alarm: the space guard refuses
// writes on the node whose disk is nearly full, but a follower's disk that
// fills still receives the leader's appends and would meet ENOSPC in its
// WAL. So a member whose free space falls under Config.ReserveBytes raises
// an alarm in the membership (a membership update of its own record,
// Member.NoSpace, replicated and applied on every replica and kept with
// the membership across restarts and images), and every node refuses new
// writes (ErrNoSpace naming the member) while a voter's alarm is raised.
// Raft's own traffic goes on: heartbeats, the leader's timestamps,
// membership changes, the appends that bring every member up to date. The
// member clears its alarm the same way once its guard sees space again.
//
// The alarm follows the guard level-triggered: after each free space check
// the member compares its guard with its record in the membership it has
// applied, and proposes the change while they differ. A proposal lost to a
// leader change or a partition is made again at the next check; a restart
// or an image changes nothing (the record is in the membership). An
// observer's alarm is recorded but refuses nothing: no quorum waits for
// its disk.

// checkSpace runs the space guard, then brings this node's alarm in the
// membership in line with it (watchSpace goroutine; tests call it).
func (j *Journal) checkSpace() {
	if err := j.space.Check(); err != nil {
		j.log.Warn("free space check failed", "err", err)
	}
	j.reportSpace()
}

// reportSpace proposes raising or clearing this node's no-space alarm when
// the membership's record differs from the guard, and waits (bounded) for
// the change to apply.
func (j *Journal) reportSpace() {
	low := j.space.Low()
	j.mu.Lock()
	self, member := j.mu.membership.Members[j.id]
	j.mu.Unlock()
	if !member || self.NoSpace == low || j.failed.Load() != nil || j.store.Halted() != nil {
		return
	}
	what := "raise the no-space alarm"
	if !low {
		what = "clear the no-space alarm"
	}
	ctx, cancel := j.untilStop(context.Background(), 5*j.electionTimeout())
	defer cancel()
	err := j.confChangeWith(ctx, what, raftpb.ConfChangeUpdateNode, j.id,
		membership.ConfContext{Addr: self.Addr, Role: self.Role, NoSpace: &low}, false)
	if err != nil {
		j.log.Warn("could not "+what+"; trying again at the next free space check", "err", err)
		return
	}
	if low {
		j.log.Error("raised the no-space alarm: the cluster refuses writes until this node has space", "dir", j.cfg.Dir)
	} else {
		j.log.Info("cleared the no-space alarm", "dir", j.cfg.Dir)
	}
}

// noSpaceAlarm returns an error wrapping ErrNoSpace, naming the member,
// while a voter's no-space alarm is raised, and nil otherwise.
func (j *Journal) noSpaceAlarm() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	m := j.mu.membership
	return diskguard.Alarm(m.Voters, func(id uint64) bool { return m.Members[id].NoSpace })
}
