package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat/epoch"
)

// regView is what one frontend process's cancel registry knew of one
// member at one sample: the member's epoch, its status and the index of
// the last event the registry applied for it (known false: the registry
// had no entry for it).
type regView struct {
	at       time.Time
	frontend uint64
	fepoch   epoch.Epoch // the frontend's process
	member   uint64
	known    bool
	state    cancel.NodeState
}

func (v regView) same(o regView) bool {
	return v.known == o.known && v.state.Epoch == o.state.Epoch && v.state.Status == o.state.Status && v.state.Index == o.state.Index
}

// eventLog is the registries' view of the members as the ground truth
// samples it: for every frontend process and member, each change of
// what its registry knows (a new epoch, a death, a later event index),
// stamped with the sample that first showed it. A registry receives its
// events from the heartbeat monitor (heartbeat.Config.OnEvent); two
// events within one sample show as one change, the index telling that
// more than one came. A failed query check prints the coordinator's
// view of the member at fault (explain), which tells a coordinator that
// never heard of an end from a ground truth that dates an end wrongly.
type eventLog struct {
	mu      sync.Mutex
	last    map[[2]uint64]regView // by frontend and member
	changes []regView
}

func newEventLog() *eventLog { return &eventLog{last: map[[2]uint64]regView{}} }

// observe records v if it differs from the last view of its frontend
// and member (a frontend's new process starts a fresh view).
func (l *eventLog) observe(v regView) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := [2]uint64{v.frontend, v.member}
	if prev, ok := l.last[k]; ok && prev.fepoch == v.fepoch && prev.same(v) {
		return
	}
	l.last[k] = v
	l.changes = append(l.changes, v)
}

// of returns the changes that frontend's process fepoch saw of member.
func (l *eventLog) of(frontend uint64, fepoch epoch.Epoch, member uint64) []regView {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []regView
	for _, v := range l.changes {
		if v.frontend == frontend && v.fepoch == fepoch && v.member == member {
			out = append(out, v)
		}
	}
	return out
}

// short is an epoch's last eight hex digits, random ones, enough to
// tell a run's epochs apart in a report (the first ones are its start
// time, alike for the processes of one run).
func short(e epoch.Epoch) string {
	s := e.String()
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	if s == "" {
		return "-"
	}
	return s
}

// explain returns, for a failed check of the query's part on member's
// process epoch, the evidence to judge it by: the member's processes in
// the ground truth (start and end in simulated time), what the
// coordinator's registry knew of the member at each change, and the
// samples around the process's end, changes only (the self-styled
// leader, its quorum, whether the member's and the coordinator's links
// with it were clean or cut).
func (m *members) explain(rec *queryRecord, member uint64, ended epoch.Epoch) string {
	var b strings.Builder
	r := m.r
	fmt.Fprintf(&b, "\n      query started at %v", r.since(rec.start))
	rec.mu.Lock()
	if !rec.finished.IsZero() {
		fmt.Fprintf(&b, ", finished at %v", r.since(rec.finished))
	}
	rec.mu.Unlock()
	m.truth.mu.Lock()
	incs := slices.Clone(m.truth.inc[member])
	m.truth.mu.Unlock()
	fmt.Fprintf(&b, "\n      member %d's processes:", member)
	var end time.Time
	for _, in := range incs {
		mark := ""
		if in.epoch == ended {
			mark, end = " (the query's)", in.down
		}
		down := "running"
		if !in.down.IsZero() {
			down = r.since(in.down).String()
		}
		fmt.Fprintf(&b, " %s %v..%s%s;", short(in.epoch), r.since(in.up), down, mark)
	}
	fmt.Fprintf(&b, "\n      frontend %d's registry (process %s) saw member %d:", rec.coord.node, short(rec.coord.epoch), member)
	views := m.truth.log.of(rec.coord.node, rec.coord.epoch, member)
	if len(views) == 0 {
		b.WriteString(" nothing")
	}
	for _, v := range views {
		if !v.known {
			fmt.Fprintf(&b, " %v unknown;", r.since(v.at))
			continue
		}
		fmt.Fprintf(&b, " %v %s %s @%d;", r.since(v.at), v.state.Status, short(v.state.Epoch), v.state.Index)
	}
	if end.IsZero() {
		return b.String()
	}
	from := end.Add(-m.deathBound)
	if rec.start.Before(from) {
		from = rec.start
	}
	if lines := r.trans.about(member, from, end.Add(2*m.deathBound), r.since); lines != "" {
		fmt.Fprintf(&b, "\n      transitions logged from %v to %v:%s", r.since(from), r.since(end.Add(2*m.deathBound)), lines)
	}
	fmt.Fprintf(&b, "\n      samples from %v to %v (changes):", r.since(end.Add(-m.deathBound)), r.since(end.Add(2*m.deathBound)))
	var prev string
	for _, s := range m.truth.between(end.Add(-m.deathBound), end.Add(2*m.deathBound)) {
		cur := fmt.Sprintf("leader %d quorum %t member clean %t cut %t, coordinator clean %t", s.leader, s.quorum, s.clean[member], s.cut[member], s.clean[rec.coord.node])
		if cur != prev {
			fmt.Fprintf(&b, "\n        %v %s", r.since(s.at), cur)
			prev = cur
		}
	}
	return b.String()
}

// sample observes what every running frontend's registry knows of every
// member now; epochs are the frontends' processes as the sample saw them.
func (l *eventLog) sample(r *run, at time.Time, epochs map[uint64]epoch.Epoch, members []uint64) {
	for i := 1; i <= r.n; i++ {
		f := r.c.Frontend(i)
		fe, runs := epochs[uint64(i)]
		if f == nil || !runs {
			continue
		}
		reg := f.Registry()
		for _, id := range members {
			st, ok := reg.Node(id)
			l.observe(regView{at: at, frontend: uint64(i), fepoch: fe, member: id, known: ok, state: st})
		}
	}
}

// explainCause is explain for the member an unjustified cancellation e
// names (its cause's node, or the coordinator for a closed registry).
func (m *members) explainCause(rec *queryRecord, e *ending) string {
	var ce *cancel.CanceledError
	if !errors.As(e.cause, &ce) {
		return m.explain(rec, rec.coord.node, rec.coord.epoch)
	}
	epoch := ce.OldEpoch
	if epoch.IsZero() {
		for _, p := range append([]part{rec.coord}, rec.workers...) {
			if p.node == ce.Node {
				epoch = p.epoch
			}
		}
	}
	return m.explain(rec, ce.Node, epoch)
}
