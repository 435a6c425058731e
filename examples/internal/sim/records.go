package sim

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
)

// recordsView is, at one instant, every running member's process and
// what each running frontend knows of every member: its cancel
// registry's state, and its member records (the heartbeat view the
// registry's events come from).
type recordsView struct {
	// epochs are the running members' current epochs.
	epochs map[uint64]epoch.Epoch
	// registries and records hold, by frontend and member, what that
	// frontend knows; a member missing is unknown to it.
	registries map[uint64]map[uint64]cancel.NodeState
	records    map[uint64]map[uint64]heartbeat.Member
	// changed holds, by frontend and member, the catalog index of the
	// member record's last change in that frontend's own catalog, read
	// before replayed; replayed holds the same of every member record the
	// frontend's heartbeat view holds. The view replays that catalog, so
	// it must come to hold every record at its last change, and no other.
	changed, replayed map[uint64]map[uint64]uint64
}

// staleRecords returns, sorted, one sentence for each running member
// whose current epoch some running frontend's registry or member records
// do not show alive, and for each member record whose last change some
// frontend's member records miss although its catalog holds it (a
// transition its replay skipped, whatever the member runs).
func staleRecords(v recordsView) []string {
	var out []string
	fronts := sortedKeys(v.registries)
	for _, f := range fronts {
		for _, id := range sortedKeys(v.changed[f]) {
			at := v.changed[f][id]
			if got, ok := v.replayed[f][id]; !ok {
				out = append(out, fmt.Sprintf("frontend %d's member records lack member %d, which its catalog holds as changed at %d", f, id, at))
			} else if got != at {
				out = append(out, fmt.Sprintf("frontend %d's member records hold member %d as changed at %d, its catalog as changed at %d", f, id, got, at))
			}
		}
		for _, id := range sortedKeys(v.replayed[f]) {
			if _, ok := v.changed[f][id]; !ok {
				out = append(out, fmt.Sprintf("frontend %d's member records hold member %d as changed at %d, which its catalog no longer holds", f, id, v.replayed[f][id]))
			}
		}
	}
	for _, id := range sortedKeys(v.epochs) {
		e := v.epochs[id]
		for _, f := range fronts {
			if st, ok := v.registries[f][id]; !ok {
				out = append(out, fmt.Sprintf("frontend %d's registry does not know member %d", f, id))
			} else if st.Epoch != e || st.Status != cancel.StatusAlive {
				out = append(out, fmt.Sprintf("frontend %d's registry holds member %d %s at %s, which runs %s", f, id, st.Status, short(st.Epoch), short(e)))
			}
			if rec, ok := v.records[f][id]; !ok {
				out = append(out, fmt.Sprintf("frontend %d's member records do not hold member %d", f, id))
			} else if rec.Epoch != e || rec.Status != heartbeat.StatusAlive {
				out = append(out, fmt.Sprintf("frontend %d's member records hold member %d %s at %s, which runs %s", f, id, rec.Status, short(rec.Epoch), short(e)))
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	ks := make([]uint64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// viewRecords takes the run's recordsView now: frontends and workers.
func (m *members) viewRecords() recordsView {
	r := m.r
	v := recordsView{epochs: map[uint64]epoch.Epoch{}, registries: map[uint64]map[uint64]cancel.NodeState{}, records: map[uint64]map[uint64]heartbeat.Member{}, changed: map[uint64]map[uint64]uint64{}, replayed: map[uint64]map[uint64]uint64{}}
	ids := make([]uint64, 0, r.n+len(m.workers))
	for i := 1; i <= r.n; i++ {
		ids = append(ids, uint64(i))
		if f := r.c.Frontend(i); f != nil {
			v.epochs[uint64(i)] = f.Epoch()
		}
	}
	for _, id := range m.workers {
		ids = append(ids, id)
		if w := r.c.Worker(id); w != nil {
			v.epochs[id] = w.Epoch()
		}
	}
	for i := 1; i <= r.n; i++ {
		f := r.c.Frontend(i)
		if f == nil {
			continue
		}
		changed := map[uint64]uint64{}
		for _, n := range f.Tree().OfKind(heartbeat.MemberKind) {
			if id, err := strconv.ParseUint(n.Name, 10, 64); err == nil && n.Path == heartbeat.MemberPath(id) {
				changed[id] = n.Modified
			}
		}
		replayed := map[uint64]uint64{}
		for _, m := range f.Members().Members() {
			replayed[m.ID] = m.Modified
		}
		v.changed[uint64(i)], v.replayed[uint64(i)] = changed, replayed
		regs, recs := map[uint64]cancel.NodeState{}, map[uint64]heartbeat.Member{}
		for _, id := range ids {
			if st, ok := f.Registry().Node(id); ok {
				regs[id] = st
			}
			if rec, ok := f.Members().Member(id); ok {
				recs[id] = rec
			}
		}
		v.registries[uint64(i)], v.records[uint64(i)] = regs, recs
	}
	return v
}

// checkRecords requires, once the faults healed at healed, every running
// member's current epoch alive in every frontend's registry and member
// records within RecoveryBound: the leader's heartbeats reach every
// member again, so it journals each return and restart, and every
// frontend applies the records and hands their events to its registry.
// It also requires each frontend's member records to hold every record
// of its own catalog at its last change: a change the replay skipped
// (a watch that missed a batch) stays until the record changes again.
// It polls view every sample interval until the views agree or the
// bound is up, and fails the run with what is still stale then.
func (r *run) checkRecords(ctx context.Context, healed time.Time, view func() recordsView) {
	deadline := healed.Add(RecoveryBound)
	for {
		stale := staleRecords(view())
		if len(stale) == 0 {
			return
		}
		if !time.Now().Before(deadline) || !pause(ctx, sampleEvery) {
			for _, s := range stale {
				r.failf("%v after the faults healed: %s", time.Since(healed).Round(time.Millisecond), s)
			}
			if js := r.journalStates(); js != "" {
				r.failf("the frontends' journals then: %s", js)
			}
			return
		}
	}
}

// journalStates says, for each running frontend, how far its journal is
// and whether it stopped: a frontend whose records lag may not have
// applied the transitions, or may have halted.
func (r *run) journalStates() string {
	var out []string
	for _, i := range r.running() {
		f := r.c.Frontend(i)
		if f == nil {
			continue
		}
		st := f.Journal().Status()
		s := fmt.Sprintf("%d: %s term %d leader %d applied %d committed %d", i, st.State, st.Term, st.Leader, st.Applied, st.Committed)
		if st.Removed {
			s += " removed"
		}
		if st.Err != nil {
			s += fmt.Sprintf(" stopped: %v", st.Err)
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}
