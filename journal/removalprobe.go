package journal

import "context"

// An observer removed while it was cut off from the leader hears nothing
// after the cut heals (the members have dropped it) and, as a learner,
// sends nothing by itself, so no member refuses it and it never learns of
// its removal. etcd's members learn of theirs from the pull streams they
// keep dialling; this transport only pushes. So an observer whose view is
// stale (no leader timestamp within Config.StaleAfter) sends, every
// StaleAfter/2, a ReadIndex that nobody waits for to the member it takes
// for the leader. A member refuses a removed node's messages with
// ErrRemoved, and the transport's report sets Status().Removed; a leader
// that still counts the observer answers it, and the answer matches no
// read round (its context is shorter than every round's) and is dropped.

// probeRemoval runs the probes until the journal stops.
func (j *Journal) probeRemoval() {
	j.every(j.cfg.StaleAfter/2, func() {
		if Role(j.role.Load()) == Observer && !j.removed.Load() && j.CheckFresh() != nil {
			j.sendRemovalProbe()
		}
	})
}

// sendRemovalProbe hands one unanswered ReadIndex to the raft loop,
// waiting at most an election timeout for the loop to take it.
func (j *Journal) sendRemovalProbe() {
	ctx, cancel := j.untilStop(context.Background(), j.electionTimeout())
	defer cancel()
	if err := j.do(ctx, func() { j.loop.rn.ReadIndex(removalProbeCtx) }); err != nil {
		j.log.Debug("removal probe not sent", "err", err)
	}
}

// removalProbeCtx is the request context of a removal probe: no read
// round has it (a round's is readround.CtxLen bytes long).
var removalProbeCtx = []byte("probe")
