package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/examples/frontend/frontendtest"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/responder"
	"github.com/metatree/metatree/internal/linearize"
	"github.com/metatree/metatree/journal"
)

// fleet is the run's frontends as the cluster holds them: the ones the
// run starts with, those that joined since, less those removed. The
// nemesis, the clients and the checks act on its members; the ground
// truth samples every frontend that ever ran.
type fleet struct {
	mu      sync.Mutex
	members []int // sorted
	ever    []int // sorted: the members and the removed
	next    int   // the id the next join takes
	// removals are the members removed, workers included, in order.
	removals []removal
	// asked holds every member whose removal was asked for, from the
	// first request on.
	asked map[uint64]bool
}

// removal is one member's removal: the process it ended, when the
// operator's call started and when it returned.
type removal struct {
	node        uint64
	epoch       epoch.Epoch
	start, done time.Time
	// forced: the member was lost with the cluster that a survivor forced
	// anew (lose). A restore's removals are not: the restored cluster
	// names the old one replaced, and workers move to it at its first
	// heartbeat whatever the terms (heartbeat/responder).
	forced bool
	// fenced, for a forced-out member, is when the old cluster's processes
	// can fence a worker off the forced one no longer: the last of them
	// stopped, plus the worker's StaleAfter. A worker refuses the new cluster's heartbeats
	// until then when the old cluster's term or list version is higher
	// (heartbeat/responder: a lower term is accepted once the higher one
	// is silent for StaleAfter), so it learns of the removal no sooner.
	fenced time.Time
}

// newFleet returns the fleet of frontends 1..n; joins take ids after the
// workers' (n+1..n+maxWorkers).
func newFleet(n int) *fleet {
	f := &fleet{next: n + maxWorkers + 1, asked: map[uint64]bool{}}
	for i := 1; i <= n; i++ {
		f.members = append(f.members, i)
	}
	f.ever = slices.Clone(f.members)
	return f
}

// ids returns the frontends that are members now, by index.
func (r *run) ids() []int {
	if r.fleet == nil {
		out := make([]int, r.n)
		for k := range out {
			out[k] = k + 1
		}
		return out
	}
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	return slices.Clone(r.fleet.members)
}

// everIDs returns every frontend that was a member at some point.
func (r *run) everIDs() []int {
	if r.fleet == nil {
		return r.ids()
	}
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	return slices.Clone(r.fleet.ever)
}

// isFrontend reports whether member id is a frontend (not a worker).
func (r *run) isFrontend(id uint64) bool {
	return slices.Contains(r.everIDs(), int(id))
}

// memberAddr is member id's address, a frontend's or a worker's.
func (r *run) memberAddr(id uint64) string {
	if r.isFrontend(id) {
		return frontendtest.Addr(int(id))
	}
	return frontendtest.WorkerAddr(id)
}

// other returns a random member frontend other than i.
func (r *run) other(rng *rand.Rand, i int) int {
	o := r.others(i)
	return o[rng.IntN(len(o))]
}

// removals returns the run's removals so far.
func (r *run) removals() []removal {
	if r.fleet == nil {
		return nil
	}
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	return slices.Clone(r.fleet.removals)
}

// removalAsked reports whether the removal of member id was asked for:
// from then on it may answer as a removed member does (API.md: a removed
// frontend stays up, answering 410 removed).
func (r *run) removalAsked(id uint64) bool {
	if r.fleet == nil {
		return false
	}
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	return r.fleet.asked[id]
}

func (r *run) askRemoval(id uint64) {
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	r.fleet.asked[id] = true
}

// removedBy reports whether a removal of member id had started by at.
func (r *run) removedBy(id uint64, at time.Time) bool {
	for _, rm := range r.removals() {
		if rm.node == id && !rm.start.After(at) {
			return true
		}
	}
	return false
}

func (r *run) joined(i int) {
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	r.fleet.members = append(r.fleet.members, i)
	slices.Sort(r.fleet.members)
	if !slices.Contains(r.fleet.ever, i) {
		r.fleet.ever = append(r.fleet.ever, i)
		slices.Sort(r.fleet.ever)
	}
}

// oldClusterStopped records that a process of the cluster a force
// replaced stopped at at: the forced-out members' removals are fenced until
// responder.DefaultStaleAfter (the frontendtest workers' StaleAfter) after
// it.
func (r *run) oldClusterStopped(at time.Time) {
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	until := at.Add(responder.DefaultStaleAfter)
	for k := range r.fleet.removals {
		if rm := &r.fleet.removals[k]; rm.forced && until.After(rm.fenced) {
			rm.fenced = until
		}
	}
}

func (r *run) removed(rm removal) {
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	r.fleet.members = slices.DeleteFunc(r.fleet.members, func(i int) bool { return uint64(i) == rm.node })
	r.fleet.removals = append(r.fleet.removals, rm)
}

// membership is an operator's membership change in the middle of the
// faults, one of: a frontend joins (a voter, or an observer that is then
// promoted half the time); a frontend is removed (a voter, often the
// leader, once one joined or was promoted, else an observer), and its
// process runs on for up to 3 s with a client's writes and reads through
// it before it stops, after which, half the time, its id tries to join
// again and must be refused; a removal that would leave too few
// reachable voters, which must be refused; or a worker removed and added
// again. The run keeps at least the voters and the frontends it started
// with. Nothing is changed while a disk is full (the cluster refuses
// writes), and in a sole voter's run the voter's disk turns fast for
// good first, as for a promotion (see slowDisk).
func (r *run) membership(ctx context.Context, rng *rand.Rand) {
	if r.fleet == nil || r.diskLow.Load() {
		return
	}
	if r.voters == 1 {
		r.promoted.Store(true)
		r.fastDisk1()
	}
	switch p := rng.IntN(100); {
	case p < 35 || (p < 65 && len(r.ids()) <= r.n):
		r.join(ctx, rng)
	case p < 65:
		r.removeFrontend(ctx, rng)
	case p < 80:
		r.unsafeRemoval(ctx, rng)
	default:
		r.removeWorker(ctx, rng)
	}
}

// maxJoins bounds the frontends that join a run.
const maxJoins = 3

// joinTries is the fewest tries of one join; a join tries through every
// running member at least once.
const joinTries = 3

// join starts a frontend with a new id that joins through a random member
// (frontendtest.JoinFrontend, as a metaserver's -join does), as a voter or
// an observer, and, half the time, promotes an observer at once. A join
// that fails may still have made the id a raft member (its outcome is
// unknown), and a voter added to a cluster that cannot reach it may leave
// no quorum to remove it with, so the join is retried as an operator
// reruns a metaserver's -join (adding a member already there with its
// address is a no-op), through every running member in turn (a member
// that has not applied the addition forwards it to a leader the voter
// it added may have taken away; one that has applied it answers at
// once), the network healed before the last try. A join
// that still fails is undone: its id is removed and never used again.
func (r *run) join(ctx context.Context, rng *rand.Rand) {
	up := r.running()
	r.fleet.mu.Lock()
	id := r.fleet.next
	if len(up) == 0 || id-(r.n+maxWorkers+1) >= maxJoins {
		r.fleet.mu.Unlock()
		return
	}
	r.fleet.next++
	r.fleet.mu.Unlock()
	role := journal.Follower
	if rng.IntN(2) == 0 {
		role = journal.Observer
	}
	var err error
	first := rng.IntN(joinTries)
	// Every running member gets a try: in a sole voter's run only the
	// voter may have applied an addition whose answer was lost, and only
	// it answers the retry then (the observers forward it to a leader the
	// unstarted voter took away).
	tries := max(joinTries, len(up))
	for try := range tries {
		if try == tries-1 {
			r.hist.fault("heal")
			r.c.Network().Heal()
			r.c.Network().ClearFaults()
		}
		up := slices.DeleteFunc(r.running(), func(i int) bool { return i == id })
		if len(up) == 0 {
			break
		}
		through := up[(first+try)%len(up)]
		jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = r.c.JoinFrontend(jctx, id, role, through)
		cancel()
		r.hist.fault("join %d as %s through %d: %v", id, role, through, err)
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		if err := r.removeRetry(ctx, id); err != nil {
			r.hist.fault("undo the join of %d: %v", id, err)
		}
		return
	}
	r.joined(id)
	if role == journal.Observer && rng.IntN(2) == 0 {
		up := r.running()
		f := r.c.Frontend(up[rng.IntN(len(up))])
		if f == nil {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f.Journal().Promote(pctx, uint64(id))
		cancel()
		r.hist.fault("promote %d through %d: %v", id, f.ID(), err)
	}
}

// raftRoles returns each member frontend's raft role as a running
// member's journal (the leader's, if one runs) records it.
func (r *run) raftRoles() map[int]journal.Role {
	up := r.running()
	if len(up) == 0 {
		return nil
	}
	from := up[0]
	if l := r.leader(); l != 0 {
		from = l
	}
	f := r.c.Frontend(from)
	if f == nil {
		return nil
	}
	roles := map[int]journal.Role{}
	for _, m := range f.Journal().Status().Members {
		if slices.Contains(up, int(m.ID)) || slices.Contains(r.ids(), int(m.ID)) {
			roles[int(m.ID)] = m.Role
		}
	}
	return roles
}

// removeFrontend removes a running member frontend: a voter (the leader
// half the time) when the run has more voters than it started with, else
// an observer. Its process runs on for up to 3 s with a client's writes
// and linearizable reads through it, recorded in the history (a removed
// process must refuse them or fail them, never acknowledge a write the
// cluster loses), then stops; half the time its id then tries to join
// again, which the cluster must refuse.
func (r *run) removeFrontend(ctx context.Context, rng *rand.Rand) {
	roles := r.raftRoles()
	voters := 0
	for _, role := range roles {
		if role == journal.Follower {
			voters++
		}
	}
	want := journal.Observer
	if voters > r.voters {
		want = journal.Follower
	}
	var candidates []int
	for _, i := range r.running() {
		if roles[i] == want {
			candidates = append(candidates, i)
		}
	}
	if len(candidates) == 0 {
		return
	}
	victim := candidates[rng.IntN(len(candidates))]
	if l := r.leader(); want == journal.Follower && l != 0 && rng.IntN(2) == 0 {
		victim = l
	}
	f := r.c.Frontend(victim)
	if f == nil {
		return
	}
	epoch := f.Epoch()
	start := time.Now()
	err := r.removeRetry(ctx, victim)
	r.hist.fault("remove %s %d: %v", want, victim, err)
	if err != nil {
		return // still a member: it stays one
	}
	r.removed(removal{node: uint64(victim), epoch: epoch, start: start, done: time.Now()})
	linger := time.Duration(rng.IntN(3000)) * time.Millisecond
	acked, refused := r.throughRemoved(ctx, rng, f, linger)
	r.hist.fault("removed %d ran %v: %d operations completed, %d refused or failed", victim, linger, acked, refused)
	r.c.StopFrontend(victim)
	if rng.IntN(2) == 0 {
		r.rejoin(ctx, rng, victim)
	}
}

// removeRetry removes member id through random running members other
// than id, again and again while the cluster cannot decide it (no leader,
// a partition, a removal unsafe for now), for up to 20 s, then, with
// every link healed, up to 20 s more. A member already gone is removed.
func (r *run) removeRetry(ctx context.Context, id int) error {
	rng := rand.New(rand.NewPCG(uint64(id), r.opts.Seed))
	r.askRemoval(uint64(id))
	var err error
	for round := range 2 {
		if round == 1 {
			r.hist.fault("heal")
			r.c.Network().Heal()
			r.c.Network().ClearFaults()
		}
		limit := time.Now().Add(20 * time.Second)
		for time.Now().Before(limit) {
			up := slices.DeleteFunc(r.running(), func(i int) bool { return i == id })
			if len(up) == 0 {
				return errors.New("no other frontend runs")
			}
			f := r.c.Frontend(up[rng.IntN(len(up))])
			if f == nil {
				continue
			}
			err = f.RemoveMember(ctx, uint64(id), false)
			if errors.Is(err, heartbeat.ErrNotFound) {
				// The frontend may not have applied the id's addition
				// yet: absent after a read barrier, it is absent.
				bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err = f.Journal().ReadBarrier(bctx)
				cancel()
				if err == nil {
					err = f.RemoveMember(ctx, uint64(id), false)
				}
			}
			if err == nil || errors.Is(err, frontend.ErrRecordLeft) || errors.Is(err, heartbeat.ErrNotFound) {
				return nil
			}
			if !pause(ctx, 200*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	return err
}

// removedClient numbers the history's client of removed frontend i.
func removedClient(i int) int { return 200 + i }

// throughRemoved writes and reads registers through removed frontend f
// for d, as a client that still uses it does, each operation recorded
// in the history (porcupine then finds an acknowledged write the cluster
// lost), and returns how many completed and how many did not.
func (r *run) throughRemoved(ctx context.Context, rng *rand.Rand, f *frontend.Frontend, d time.Duration) (completed, failed int) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	id := removedClient(int(f.ID()))
	for seq := 0; ctx.Err() == nil; seq++ {
		k := rng.IntN(keys)
		ok := false
		if rng.IntN(2) == 0 {
			ok = r.putThrough(ctx, f, id, k, fmt.Sprintf("c%d-%d", id, seq))
		} else {
			ok = r.cl.read(ctx, f, id, k)
		}
		if ok {
			completed++
		} else {
			failed++
		}
		if !pause(ctx, time.Duration(10+rng.IntN(200))*time.Millisecond) {
			break
		}
	}
	return completed, failed
}

// putThrough puts register k through f as client id, recorded in the
// history as clients.put records it, and reports whether the write was
// acknowledged.
func (r *run) putThrough(ctx context.Context, f *frontend.Frontend, id, k int, value string) bool {
	in := linearize.KV{Put: true, Key: keyPath(k), Value: value}
	call := r.hist.call()
	res, err := f.Write(ctx, catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpUpdate, Path: keyPath(k), Set: map[string]catalog.Value{"v": catalog.String(value)}},
	}})
	switch {
	case res != nil && err == nil:
		r.hist.done(id, call, in, nil, true)
		return true
	case res != nil && r.quotaRefused(err):
		r.hist.failed(in)
	case res != nil:
		r.failf("put %s=%s through removed frontend %d failed as a batch: %v", keyPath(k), value, f.ID(), err)
		r.hist.done(id, call, in, nil, false)
	case definite(err):
		r.hist.failed(in)
	default:
		r.hist.done(id, call, in, nil, false)
	}
	return false
}

// rejoin tries to join removed frontend i again, on an empty data dir,
// through a random member: the cluster must refuse it (journal.AddMember
// never reuses a removed id). A join it admits fails the run, and is
// undone.
func (r *run) rejoin(ctx context.Context, rng *rand.Rand, i int) {
	up := r.running()
	if len(up) == 0 {
		return
	}
	through := up[rng.IntN(len(up))]
	jctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	_, err := r.c.JoinFrontend(jctx, i, journal.Follower, through)
	cancel()
	r.hist.fault("rejoin removed %d through %d: %v", i, through, err)
	if err == nil {
		r.failf("removed frontend %d joined again through %d: a removed id must be refused", i, through)
		r.c.StopFrontend(i)
		if err := r.removeRetry(ctx, i); err != nil {
			r.failf("remove frontend %d again after its rejoin: %v", i, err)
		}
	}
}

// unsafeRemoval asks for a removal that would leave too few reachable
// voters: in a sole voter's run, of the voter itself; with an odd number
// of voters, of a follower while enough of the other followers are cut
// off from the rest (for longer than the election timeout, so that the
// leader counts them unreachable) that a quorum of the voters left could
// not be reached, through the leader. The cluster must refuse it
// (journal.ErrUnsafeRemoval): one that applies fails the run.
func (r *run) unsafeRemoval(ctx context.Context, rng *rand.Rand) {
	r.c.Network().Heal()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	l, err := r.c.Leader(lctx)
	cancel()
	if err != nil {
		return
	}
	lf := r.c.Frontend(l)
	if lf == nil {
		return
	}
	var followers []int
	for _, m := range lf.Journal().Status().Members {
		if m.Role != journal.Follower || int(m.ID) == l {
			continue
		}
		if r.c.Frontend(int(m.ID)) == nil {
			return // a voter down: the cut below would not tell
		}
		followers = append(followers, int(m.ID))
	}
	slices.Sort(followers)
	v := len(followers) + 1
	victim := l
	switch {
	case v == 1:
	case v%2 == 1:
		rng.Shuffle(len(followers), func(a, b int) { followers[a], followers[b] = followers[b], followers[a] })
		victim = followers[0]
		cut := followers[1 : 1+(v-1)-(v-1)/2]
		for _, c := range cut {
			r.c.Partition(c, r.others(c)...)
		}
		r.hist.fault("cut %v off for an unsafe removal", cut)
		pause(ctx, 2*time.Second) // past the election timeout (10 ticks of 100 ms)
	default:
		return
	}
	r.askRemoval(uint64(victim))
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = lf.RemoveMember(rctx, uint64(victim), false)
	cancel()
	r.hist.fault("unsafe removal of %d through %d: %v", victim, l, err)
	r.c.Network().Heal()
	applied := err == nil
	if err != nil && !errors.Is(err, journal.ErrUnsafeRemoval) {
		// An outcome left open: the membership tells once a leader is back.
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		if nl, lerr := r.c.Leader(lctx); lerr == nil {
			if lf := r.c.Frontend(nl); lf != nil && lf.Journal().ReadBarrier(lctx) == nil {
				applied = !slices.ContainsFunc(lf.Journal().Status().Members, func(m journal.Member) bool { return int(m.ID) == victim })
			}
		}
		cancel()
	}
	if !applied {
		return
	}
	r.failf("the removal of %d through %d, unsafe (%d voters, too few of them reachable), was not refused: %v", victim, l, v, err)
	if victim != l || v > 1 {
		r.removed(removal{node: uint64(victim), start: time.Now(), done: time.Now()})
		r.c.StopFrontend(victim)
	}
}

// removeWorker removes a running worker through a random frontend, lets
// its process run on for up to 3 s, and adds it again
// (frontendtest.ReaddWorker: a new process under the same id): every
// query with a part on the removed process is cancelled within the death
// bound (checkRemovalBound), and the re-added worker serves the queries
// that start after. The worker nemesis waits meanwhile.
func (r *run) removeWorker(ctx context.Context, rng *rand.Rand) {
	m := r.mem
	if m == nil {
		return
	}
	select {
	case m.op <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-m.op }()
	var up []uint64
	for _, id := range m.workers {
		if r.c.Worker(id) != nil {
			up = append(up, id)
		}
	}
	if len(up) == 0 {
		return
	}
	id := up[rng.IntN(len(up))]
	w := r.c.Worker(id)
	if w == nil {
		return
	}
	epoch := w.Epoch()
	start := time.Now()
	err := r.removeRetry(ctx, int(id))
	r.hist.fault("remove worker %d: %v", id, err)
	if err == nil {
		r.removed(removal{node: id, epoch: epoch, start: start, done: time.Now()})
	}
	pause(ctx, time.Duration(rng.IntN(3000))*time.Millisecond)
	for attempt := range 2 {
		at := time.Now()
		m.truth.stopping(id, at)
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := r.c.ReaddWorker(actx, id)
		cancel()
		if w := r.c.Worker(id); w != nil {
			m.truth.started(id, w.Epoch(), at)
		}
		r.hist.fault("re-add worker %d: %v", id, err)
		if err == nil || ctx.Err() != nil {
			return
		}
		if attempt == 0 {
			r.hist.fault("heal")
			r.c.Network().Heal()
			r.c.Network().ClearFaults()
		}
	}
}

// checkRemovalBound requires, for each removal of a member, every query
// with a part on the process it removed, registered before the removal
// returned, to have its dependent parts cancelled within the death bound
// of the return (the README's bound for a death; a removal is decided
// sooner), or of its fence for a member a forced new cluster left out
// (removal.fenced): the coordinator's part when a worker was removed, every
// fragment when the coordinator was. It judges only where the cluster
// could act on it throughout (one leader with a quorum, clean links to
// the parts left, their processes running), and not a query that finished
// first. It returns how many removals of a query's part it held to the
// bound.
func (m *members) checkRemovalBound(removals []removal) (held int) {
	m.mu.Lock()
	qs := m.queries
	m.mu.Unlock()
	for _, rm := range removals {
		deadline := rm.done.Add(m.deathBound)
		if rm.fenced.After(rm.done) {
			deadline = rm.fenced.Add(m.deathBound)
		}
		bound := deadline.Sub(rm.done)
		for _, rec := range qs {
			if !rec.start.Before(rm.done) {
				continue
			}
			rec.mu.Lock()
			coordEnd, fragEnds, finished := rec.coordEnd, rec.fragEnds, rec.finished
			rec.mu.Unlock()
			// The parts whose cancellation the removal requires, and the
			// parts left that must be reachable for it.
			var due []*ending
			var names []string
			var left []part
			switch {
			case rec.coord == part{rm.node, rm.epoch}:
				left = rec.workers
				for _, w := range rec.workers {
					due = append(due, fragEnds[w.node])
					names = append(names, fmt.Sprintf("the fragment on worker %d", w.node))
				}
			case slices.Contains(rec.workers, part{rm.node, rm.epoch}):
				left = []part{rec.coord}
				due = append(due, coordEnd)
				names = append(names, "the coordinator's part")
			default:
				continue
			}
			if !finished.IsZero() && finished.Before(deadline) {
				continue // finished before the bound was up
			}
			if !m.removalActionable(left, rm.done, deadline) {
				continue
			}
			held++
			for k, e := range due {
				if e != nil && !e.at.After(deadline) {
					continue
				}
				late := "was never cancelled"
				if e != nil {
					late = fmt.Sprintf("was cancelled %v after", e.at.Sub(rm.done).Round(time.Millisecond))
				}
				m.r.failf("%s: member %d was removed at %v, the cluster able to act on it throughout, and %s %s (bound %v)", rec, rm.node, m.r.since(rm.done), names[k], late, bound)
			}
		}
	}
	return held
}

// removalActionable reports whether the cluster could act on a removal
// throughout [from, to]: one leader with a quorum, and clean links to
// each of the parts left, whose processes run.
func (m *members) removalActionable(left []part, from, to time.Time) bool {
	ss := m.truth.between(from, to)
	if len(ss) == 0 {
		return false
	}
	leader := ss[0].leader
	for _, s := range ss {
		if s.leader == 0 || s.leader != leader || !s.quorum {
			return false
		}
		for _, p := range left {
			if !s.clean[p.node] || s.epochs[p.node] != p.epoch {
				return false
			}
		}
	}
	return true
}
