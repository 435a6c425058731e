package sim

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/metatree/metatree/examples/frontend/frontendtest"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/journal"
)

// sampleEvery is how often the ground truth samples the cluster. A death
// takes DeadAfter missed heartbeats over at least DeadAfter intervals, so
// a cut long enough to cause one spans many samples.
const sampleEvery = 100 * time.Millisecond

// incarnation is one process of a member: its epoch, when it started and
// when it ended (zero while it runs).
type incarnation struct {
	epoch    epoch.Epoch
	up, down time.Time
}

// sample is the cluster as the ground truth saw it at one instant.
type sample struct {
	at time.Time
	// leader is the one running frontend that considers itself leader,
	// or 0 when none or several do.
	leader int
	// quorum: a majority of the frontends run, the leader's links to
	// them are clean (neither cut nor faulty, both ways) and no voter's
	// disk is slow.
	quorum bool
	// clean holds the members whose links with the leader are clean both
	// ways (the leader's own id included); a frontend outside the
	// leader's membership (removed, or not joined yet) is not clean: no
	// entry reaches it, so it learns of no member's change.
	clean map[uint64]bool
	// cut holds the members that some self-styled leader cannot reach, or
	// that cannot reach it, or whose link with it resets connections.
	cut map[uint64]bool
	// epochs are the running members' epochs.
	epochs map[uint64]epoch.Epoch
}

// truth is the ground truth of a run's members: every process each
// member ran (frontends sampled, workers recorded as the simulator starts
// and stops them) and, every sampleEvery, who led and who could reach
// whom. The query checks judge every cancellation against it.
type truth struct {
	r       *run
	workers []uint64
	log     *eventLog // the registries' view of the members

	mu      sync.Mutex
	inc     map[uint64][]incarnation
	samples []sample
}

func newTruth(r *run, workers []uint64) *truth {
	return &truth{r: r, workers: workers, log: newEventLog(), inc: map[uint64][]incarnation{}}
}

// started records that worker id runs a process with epoch e since at.
func (tr *truth) started(id uint64, e epoch.Epoch, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.inc[id] = append(tr.inc[id], incarnation{epoch: e, up: at})
}

// stopped records that worker id's running process ends at at.
func (tr *truth) stopped(id uint64, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if l := tr.inc[id]; len(l) > 0 && l[len(l)-1].down.IsZero() {
		l[len(l)-1].down = at
	}
}

// stopping records that worker id's process, about to stop at at, runs
// with the epoch it has then (a fresh one the samples may not have seen
// yet), and that it stops.
func (tr *truth) stopping(id uint64, at time.Time) {
	w := tr.r.c.Worker(id)
	tr.mu.Lock()
	if w != nil {
		tr.renewedLocked(id, w.Epoch(), at)
	}
	tr.mu.Unlock()
	tr.stopped(id, at)
}

// renewedLocked records that running worker id's process runs with epoch
// e, which it did not at the time before: a process declared dead while
// cut off draws a fresh epoch when it hears from a leader again, since
// the log ended the one it had. The query checks judge its epochs as two
// processes, the first ending at before, when the second starts.
func (tr *truth) renewedLocked(id uint64, e epoch.Epoch, before time.Time) {
	l := tr.inc[id]
	if len(l) == 0 || !l[len(l)-1].down.IsZero() || l[len(l)-1].epoch == e {
		return
	}
	l[len(l)-1].down = before
	tr.inc[id] = append(l, incarnation{epoch: e, up: before})
}

// sampleLoop samples the cluster until ctx ends.
func (tr *truth) sampleLoop(ctx context.Context) {
	for {
		tr.sample()
		if !pause(ctx, sampleEvery) {
			return
		}
	}
}

// sample takes one sample, and records the frontends' processes that
// started or ended since the last.
func (tr *truth) sample() {
	r := tr.r
	net := r.c.Network()
	s := sample{at: time.Now(), clean: map[uint64]bool{}, cut: map[uint64]bool{}, epochs: map[uint64]epoch.Epoch{}}
	var leaders []int
	ever := r.everIDs()
	for _, i := range ever {
		if f := r.c.Frontend(i); f != nil {
			s.epochs[uint64(i)] = f.Epoch()
			if f.Journal().Status().IsLeader() {
				leaders = append(leaders, i)
			}
		}
	}
	for _, id := range tr.workers {
		if w := r.c.Worker(id); w != nil {
			s.epochs[id] = w.Epoch()
		}
	}
	members := make([]uint64, 0, len(ever)+len(tr.workers))
	for _, i := range ever {
		members = append(members, uint64(i))
	}
	members = append(members, tr.workers...)
	tr.log.sample(r, s.at, s.epochs, members)
	for _, l := range leaders {
		// Every self-styled leader counts: one cut from a majority counts
		// misses all the same, and journals the death once it reaches a
		// majority again.
		la := frontendtest.Addr(l)
		for _, m := range members {
			if m == uint64(l) {
				continue
			}
			ma := r.memberAddr(m)
			fo, eo := net.Link(la, ma)
			fi, ei := net.Link(ma, la)
			if eo != nil || ei != nil || fo.Reset > 0 || fi.Reset > 0 {
				s.cut[m] = true
			}
			if len(leaders) == 1 && eo == nil && ei == nil && fo == (frontendtest.Faults{}) && fi == (frontendtest.Faults{}) {
				s.clean[m] = true
			}
		}
	}
	if len(leaders) == 1 {
		s.leader = leaders[0]
		s.clean[uint64(s.leader)] = true
		// The quorum counts the voters of the leader's membership: the
		// observers (joined ones too) do not vote.
		up, voters := 0, 0
		if lf := r.c.Frontend(s.leader); lf != nil {
			ms := lf.Journal().Status().Members
			for _, id := range outside(ever, ms) {
				delete(s.clean, id)
			}
			for _, m := range ms {
				if m.Role == journal.Observer {
					continue
				}
				voters++
				if _, runs := s.epochs[m.ID]; runs && s.clean[m.ID] {
					up++
				}
			}
		}
		// A voter whose fsyncs outlast the election timeout commits
		// nothing within the bounds, and a full disk's alarm refuses
		// every write: the cluster cannot act in time.
		s.quorum = voters > 0 && up > voters/2 && !r.diskSlow.Load() && !r.noSpace(s.leader)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	before := s.at
	if len(tr.samples) > 0 {
		before = tr.samples[len(tr.samples)-1].at
	}
	for _, id := range tr.workers {
		if e, runs := s.epochs[id]; runs {
			tr.renewedLocked(id, e, before)
		}
	}
	for _, i := range ever {
		id := uint64(i)
		l := tr.inc[id]
		e, runs := s.epochs[id]
		last := len(l) - 1
		if last >= 0 && l[last].down.IsZero() && (!runs || l[last].epoch != e) {
			l[last].down = s.at
		}
		if runs && (last < 0 || !l[last].down.IsZero() || l[last].epoch != e) {
			l = append(l, incarnation{epoch: e, up: s.at})
		}
		tr.inc[id] = l
	}
	tr.samples = append(tr.samples, s)
}

// incarnationOf returns member id's process with epoch e.
func (tr *truth) incarnationOf(id uint64, e epoch.Epoch) (incarnation, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	i := slices.IndexFunc(tr.inc[id], func(in incarnation) bool { return in.epoch == e })
	if i < 0 {
		return incarnation{}, false
	}
	return tr.inc[id][i], true
}

// between returns the samples taken in [from, to].
func (tr *truth) between(from, to time.Time) []sample {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	lo, _ := slices.BinarySearchFunc(tr.samples, from, func(s sample, t time.Time) int { return s.at.Compare(t) })
	hi, found := slices.BinarySearchFunc(tr.samples, to, func(s sample, t time.Time) int { return s.at.Compare(t) })
	if found {
		hi++
	}
	return tr.samples[lo:hi]
}

// outside returns the frontends of ever that the membership ms does not
// hold: removed, or not joined yet.
func outside(ever []int, ms []journal.Member) []uint64 {
	var out []uint64
	for _, i := range ever {
		if !slices.ContainsFunc(ms, func(m journal.Member) bool { return m.ID == uint64(i) }) {
			out = append(out, uint64(i))
		}
	}
	return out
}
