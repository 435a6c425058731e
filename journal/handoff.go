package journal

import (
	"context"

	"go.etcd.io/raft/v3"

	"github.com/metatree/metatree/internal/operr"
)

// Handoff is the step a host takes before Close on a planned stop: on the
// leader it transfers leadership to the most caught-up voter and waits
// until that voter leads, bounded by ctx and by two election timeouts. On
// a follower or an observer, and on a leader without another voter, it
// returns nil at once: there is nothing to hand off.
//
// Writes go on meanwhile. While raft transfers, the leader refuses new
// entries and Propose on it retries them (every tick, or as entries apply)
// until the new leader is known, then forwards them; proposals forwarded
// by followers are retried as soon as they see the new term. None fails
// for the hand-off, and none waits much longer than the transfer itself
// (BenchmarkHandoff). Handoff does not stop the node: it keeps serving
// reads and forwarding writes as a follower until Close.
func (j *Journal) Handoff(ctx context.Context) error {
	if !j.Status().IsLeader() {
		return nil
	}
	var to uint64
	if err := j.do(ctx, func() { to = successor(j.loop.rn.Status()) }); err != nil {
		return operr.Errorf("journal: handoff: %w", err)
	}
	if to == 0 {
		j.log.Info("handoff: no other voter to hand leadership to")
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*j.electionTimeout())
	defer cancel()
	start := j.cfg.Clock.Now()
	if err := j.TransferLeadership(ctx, to); err != nil {
		return operr.Errorf("journal: handoff: %w", err)
	}
	j.log.Info("handoff: leadership transferred", "to", to, "took", j.cfg.Clock.Now().Sub(start))
	return nil
}

// successor picks the voter to hand leadership to from the leader's
// status: the recently active voter whose log matches the leader's
// furthest (the one raft can hand over to soonest), then any voter by
// match, lowest id first on ties; 0 when the leader is the only voter.
func successor(st raft.Status) uint64 {
	var best uint64
	var bestMatch uint64
	bestActive := false
	for id := range st.Config.Voters.IDs() {
		if id == st.ID {
			continue
		}
		pr, ok := st.Progress[id]
		if !ok {
			continue
		}
		better := best == 0 ||
			(pr.RecentActive && !bestActive) ||
			(pr.RecentActive == bestActive && (pr.Match > bestMatch || (pr.Match == bestMatch && id < best)))
		if better {
			best, bestMatch, bestActive = id, pr.Match, pr.RecentActive
		}
	}
	return best
}
