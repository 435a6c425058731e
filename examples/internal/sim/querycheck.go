package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/metatree/metatree/cancel"
)

// checkQueries judges every query of the run against the ground truth:
//
//   - no part of a query is cancelled unless a process it depends on
//     ended (restarted, stopped), was cut off from a leader that reached a
//     majority (a death the cluster may declare), or was removed;
//   - a worker's restart or stop cancels the queries registered on its
//     old process within the README's bound (restartBound from the new
//     process's start, deathBound from the stop, whichever comes first),
//     wherever the cluster could act on it throughout: one leader with a
//     quorum all along, clean links to the coordinator and the worker, the
//     coordinator running and in the leader's membership;
//   - every ended process cancels, by the end of the run (healed, with the
//     death bound to spare), every query part that depends on it.
//
// It returns the number of queries, of those a member's change
// cancelled, and of those held to the bound.
func (m *members) checkQueries() (queries, cancelled, bounded int) {
	m.mu.Lock()
	qs := m.queries
	m.mu.Unlock()
	for _, rec := range qs {
		rec.mu.Lock()
		coordEnd, fragEnds, finished, ran := rec.coordEnd, rec.fragEnds, rec.finished, rec.ranAtFinish
		rec.mu.Unlock()
		if coordEnd != nil {
			if why := m.unjustified(rec, rec.coord, coordEnd); why != "" {
				m.r.failf("%s: its coordinator's part was cancelled at %v (%v), but %s%s", rec, m.r.since(coordEnd.at), coordEnd.cause, why, m.explainCause(rec, coordEnd))
			}
		}
		for _, w := range rec.workers {
			if e := fragEnds[w.node]; e != nil {
				if why := m.unjustified(rec, w, e); why != "" {
					m.r.failf("%s: its fragment on worker %d was cancelled at %v (%v), but %s%s", rec, w.node, m.r.since(e.at), e.cause, why, m.explainCause(rec, e))
				}
			}
		}
		if coordEnd != nil {
			cancelled++
		}
		bounded += m.checkBound(rec, coordEnd, finished, ran)
		m.checkEventual(rec, coordEnd, fragEnds, finished, ran)
	}
	return len(qs), cancelled, bounded
}

func (rec *queryRecord) String() string {
	ws := make([]uint64, len(rec.workers))
	for k, w := range rec.workers {
		ws[k] = w.node
	}
	return fmt.Sprintf("query on frontend %d (epoch %v) with workers %v", rec.coord.node, rec.coord.epoch, ws)
}

// since is at as simulated time since the run's start.
func (r *run) since(at time.Time) time.Duration { return at.Sub(r.hist.start).Round(time.Millisecond) }

// slack is how late the ground truth may learn that a frontend's process
// ended: the next sample.
func (m *members) slack(node uint64) time.Duration {
	if m.r.isFrontend(node) {
		return 2 * sampleEvery
	}
	return 0
}

// unjustified returns why the cancellation e of the query's part owner
// has no cause in the ground truth, or "".
func (m *members) unjustified(rec *queryRecord, owner part, e *ending) string {
	if errors.Is(e.cause, cancel.ErrClosed) {
		in, ok := m.truth.incarnationOf(owner.node, owner.epoch)
		if !ok {
			return fmt.Sprintf("member %d's process %v is unknown", owner.node, owner.epoch)
		}
		if in.down.IsZero() || in.down.After(e.at.Add(m.slack(owner.node))) {
			return fmt.Sprintf("the registry closed while member %d's process ran", owner.node)
		}
		return ""
	}
	var ce *cancel.CanceledError
	if !errors.As(e.cause, &ce) {
		return "the cause is neither a member's change nor a closed registry"
	}
	epoch := ce.OldEpoch
	if epoch.IsZero() {
		if ce.Node == rec.coord.node {
			epoch = rec.coord.epoch
		}
		for _, w := range rec.workers {
			if w.node == ce.Node {
				epoch = w.epoch
			}
		}
	}
	in, ok := m.truth.incarnationOf(ce.Node, epoch)
	if !ok {
		return fmt.Sprintf("member %d never ran a process with epoch %v", ce.Node, epoch)
	}
	if !in.down.IsZero() && !in.down.After(e.at.Add(m.slack(ce.Node))) {
		return "" // the process had ended
	}
	switch ce.Reason {
	case cancel.Dead:
		// A leader may decide a death long before it commits (its
		// proposal waits out a partition), so any cut in the process's
		// life justifies it.
		for _, s := range m.truth.between(in.up, e.at) {
			if s.cut[ce.Node] {
				return ""
			}
		}
		return fmt.Sprintf("member %d's process %v ran, reachable from every leader, from its start at %v to then", ce.Node, epoch, m.r.since(in.up))
	case cancel.Removed:
		if m.r.removedBy(ce.Node, e.at) {
			return ""
		}
		return fmt.Sprintf("member %d was never removed", ce.Node)
	}
	return fmt.Sprintf("member %d's process %v still ran", ce.Node, epoch)
}

// nextAfter returns the process member node started after in ended, if
// any.
func (m *members) nextAfter(node uint64, in incarnation) (incarnation, bool) {
	m.truth.mu.Lock()
	defer m.truth.mu.Unlock()
	for _, n := range m.truth.inc[node] {
		if !n.up.Before(in.down) && n.epoch != in.epoch {
			return n, true
		}
	}
	return incarnation{}, false
}

// checkBound requires, for each worker process of the query that ended
// while it ran, the coordinator's part cancelled within the bound, where
// the cluster could act on it throughout. It returns how many changes it
// held to the bound.
func (m *members) checkBound(rec *queryRecord, coordEnd *ending, finished time.Time, ran map[uint64]bool) (n int) {
	for _, w := range rec.workers {
		in, ok := m.endedWhileLive(rec, w, finished, ran)
		if !ok {
			continue
		}
		if coordEnd != nil && !coordEnd.at.After(in.down) {
			continue // cancelled before, for another cause
		}
		deadline := in.down.Add(m.deathBound)
		bound, what := m.deathBound, "stopped"
		next, restarted := m.nextAfter(w.node, in)
		if restarted && next.up.Add(m.restartBound).Before(deadline) {
			deadline, bound, what = next.up.Add(m.restartBound), m.restartBound, "restarted"
		}
		if finished.Before(deadline) && coordEnd == nil {
			continue // finished before the bound was up
		}
		if !m.actionable(rec, w.node, in.down.Add(-m.deathBound), deadline, what == "stopped", restarted, next) {
			continue
		}
		n++
		if coordEnd != nil && !coordEnd.at.After(deadline) {
			continue
		}
		late := "was never cancelled"
		if coordEnd != nil {
			late = fmt.Sprintf("was cancelled %v after", coordEnd.at.Sub(deadline.Add(-bound)).Round(time.Millisecond))
		}
		m.r.failf("%s: worker %d %s at %v, the cluster able to act on it throughout, and the query %s (bound %v)%s", rec, w.node, what, m.r.since(in.down), late, bound, m.explain(rec, w.node, w.epoch))
	}
	return n
}

// actionable reports whether the cluster could act on worker's change
// throughout [from, to]: one leader, with a quorum, clean links to the
// coordinator and to the worker (for a stop, all along: a delayed link
// to it delays the heartbeats the leader counts as missed, and so the
// death; for a restart, once its next process runs), and the
// coordinator's process running, in the leader's membership (clean: a
// removed frontend learns of no change).
func (m *members) actionable(rec *queryRecord, worker uint64, from, to time.Time, stop, restarted bool, next incarnation) bool {
	ss := m.truth.between(from, to)
	if len(ss) == 0 {
		return false
	}
	leader := ss[0].leader
	for _, s := range ss {
		if s.leader == 0 || s.leader != leader || !s.quorum || !s.clean[rec.coord.node] || s.epochs[rec.coord.node] != rec.coord.epoch {
			return false
		}
		if restarted && !s.at.Before(next.up) && (!s.clean[worker] || s.epochs[worker] != next.epoch) {
			return false
		}
		if stop && !s.clean[worker] {
			return false
		}
	}
	return true
}

// endedWhileLive returns the process of part p of the query if it ended
// while the query ran: after its start, before it finished at finished,
// and not still running then (ran, as the query saw its members when it
// finished: the ground truth may date an end early, see ranAtFinish).
func (m *members) endedWhileLive(rec *queryRecord, p part, finished time.Time, ran map[uint64]bool) (incarnation, bool) {
	in, ok := m.truth.incarnationOf(p.node, p.epoch)
	return in, ok && !ran[p.node] && !in.down.IsZero() && in.down.After(rec.start) && in.down.Before(finished)
}

// checkEventual requires, once the run healed, every part of the query
// that depends on an ended process cancelled: the coordinator's for a
// worker's process, every fragment for the coordinator's.
func (m *members) checkEventual(rec *queryRecord, coordEnd *ending, fragEnds map[uint64]*ending, finished time.Time, ran map[uint64]bool) {
	if coordEnd == nil {
		for _, w := range rec.workers {
			if in, ok := m.endedWhileLive(rec, w, finished, ran); ok {
				m.r.failf("%s: worker %d's process ended at %v and the coordinator's part was never cancelled%s", rec, w.node, m.r.since(in.down), m.explain(rec, w.node, w.epoch))
			}
		}
	}
	if in, ok := m.endedWhileLive(rec, rec.coord, finished, ran); ok {
		for _, w := range rec.workers {
			if fragEnds[w.node] == nil {
				m.r.failf("%s: the coordinator's process ended at %v and the fragment on worker %d was never cancelled%s", rec, m.r.since(in.down), w.node, m.explain(rec, rec.coord.node, rec.coord.epoch))
			}
		}
	}
}
