package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/responder"
)

// removalHistory is a hand-made run of frontends 1..3 and worker 4: a
// query coordinated by frontend 1 with a fragment on worker 4, worker 4
// removed at 1 s to 2 s, and samples every 100 ms to 10 s of one leader
// with a quorum and clean links to every member.
func removalHistory(t0 time.Time) (*run, *members, *queryRecord, removal) {
	r := &run{n: 3, hist: newHistory(t0, nil), fleet: newFleet(3)}
	m := &members{r: r, workers: []uint64{4}, truth: newTruth(r, []uint64{4}), deathBound: 4 * time.Second, restartBound: 2 * time.Second}
	coord, worker := epoch.New(), epoch.New()
	m.truth.inc[1] = []incarnation{{epoch: coord, up: t0}}
	m.truth.started(4, worker, t0)
	for at := t0; !at.After(t0.Add(10 * time.Second)); at = at.Add(sampleEvery) {
		m.truth.samples = append(m.truth.samples, sample{
			at: at, leader: 1, quorum: true,
			clean:  map[uint64]bool{1: true, 2: true, 3: true, 4: true},
			cut:    map[uint64]bool{},
			epochs: map[uint64]epoch.Epoch{1: coord, 4: worker},
		})
	}
	rec := &queryRecord{coord: part{1, coord}, workers: []part{{4, worker}}, start: t0.Add(500 * time.Millisecond), fragEnds: map[uint64]*ending{}}
	m.queries = []*queryRecord{rec}
	rm := removal{node: 4, epoch: worker, start: t0.Add(time.Second), done: t0.Add(2 * time.Second)}
	r.removed(rm)
	return r, m, rec, rm
}

// A worker's removal must cancel the coordinator's part of its queries
// within the death bound of the removal's return; the check counts what
// it held to the bound and names a query left running.
func TestCheckRemovalBoundRequiresTheCancellationWithinTheDeathBound(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		cancel time.Duration // from t0; 0: never
		fail   string
	}{
		{"cancelled within the bound", 2*time.Second + 300*time.Millisecond, ""},
		{"cancelled after the bound", 7 * time.Second, "was cancelled 5s after"},
		{"never cancelled", 0, "was never cancelled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, m, rec, rm := removalHistory(t0)
			if c.cancel > 0 {
				rec.coordEnd = &ending{at: t0.Add(c.cancel), cause: &cancel.CanceledError{Node: 4, OldEpoch: rm.epoch, Reason: cancel.Removed}}
			}
			require.Equal(t, 1, m.checkRemovalBound(r.removals()), "the removal held to the bound")
			if c.fail == "" {
				require.Empty(t, r.failures)
				return
			}
			require.Len(t, r.failures, 1)
			require.Contains(t, r.failures[0], "member 4 was removed at 2s")
			require.Contains(t, r.failures[0], "the coordinator's part "+c.fail)
		})
	}
}

// A query that finished before the bound was up, or one the cluster could
// not act on (no quorum for a while), is not held to the bound; a
// cancellation for the removal is justified by it.
func TestCheckRemovalBoundSparesWhatTheClusterCouldNotAct(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, m, rec, rm := removalHistory(t0)
	rec.finished = t0.Add(3 * time.Second)
	require.Equal(t, 0, m.checkRemovalBound(r.removals()))
	require.Empty(t, r.failures, "finished before the bound")

	r, m, _, _ = removalHistory(t0)
	m.truth.samples[40].quorum = false
	require.Equal(t, 0, m.checkRemovalBound(r.removals()))
	require.Empty(t, r.failures, "no quorum at 4 s")

	r, m, rec, rm = removalHistory(t0)
	removed := &ending{at: t0.Add(1500 * time.Millisecond), cause: &cancel.CanceledError{Node: 4, OldEpoch: rm.epoch, Reason: cancel.Removed}}
	require.Empty(t, m.unjustified(rec, rec.coord, removed), "a cancellation after the removal started")
	early := &ending{at: t0.Add(500 * time.Millisecond), cause: removed.cause}
	require.Contains(t, m.unjustified(rec, rec.coord, early), "never removed", "a cancellation before it")
}

// The removal of a query's coordinator requires every fragment cancelled.
func TestCheckRemovalBoundRequiresTheFragmentsOfARemovedCoordinator(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, m, rec, _ := removalHistory(t0)
	r.fleet.removals = []removal{{node: 1, epoch: rec.coord.epoch, start: t0.Add(time.Second), done: t0.Add(2 * time.Second)}}
	require.Equal(t, 1, m.checkRemovalBound(r.removals()))
	require.Len(t, r.failures, 1)
	require.Contains(t, r.failures[0], "the fragment on worker 4 was never cancelled")

	r, m, rec, _ = removalHistory(t0)
	r.fleet.removals = []removal{{node: 1, epoch: rec.coord.epoch, start: t0.Add(time.Second), done: t0.Add(2 * time.Second)}}
	rec.fragEnds[4] = &ending{at: t0.Add(3 * time.Second), cause: &cancel.CanceledError{Node: 1, Reason: cancel.Removed}}
	require.Equal(t, 1, m.checkRemovalBound(r.removals()))
	require.Empty(t, r.failures)
}

// A member that a forced new cluster left out leaves in a log that a
// worker may not follow yet: a worker that heard a higher term or list
// version from the old processes refuses the forced cluster's heartbeats
// until they have been silent for its StaleAfter. The removal's fragments
// are held to the death bound from that fence on; a plain removal's (and a
// restore's) are not.
func TestCheckRemovalBoundWaitsOutTheForcedOutClustersFence(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	stopped := t0.Add(time.Second)
	fence := stopped.Add(responder.DefaultStaleAfter) // the deadline: fence + 4 s
	for _, c := range []struct {
		name   string
		forced bool
		cancel time.Duration // after the fence
		fail   string
	}{
		{"forced out, cancelled after the fence within the bound", true, 3 * time.Second, ""},
		{"forced out, cancelled past the fence's bound", true, 5 * time.Second, "was cancelled 14s after"},
		{"removed in the log, cancelled as late", false, 3 * time.Second, "(bound 4s)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, m, rec, _ := removalHistory(t0)
			last := m.truth.samples[len(m.truth.samples)-1]
			for at := last.at.Add(sampleEvery); !at.After(t0.Add(20 * time.Second)); at = at.Add(sampleEvery) {
				s := last
				s.at = at
				m.truth.samples = append(m.truth.samples, s)
			}
			r.fleet.removals = []removal{{node: 1, epoch: rec.coord.epoch, start: t0.Add(time.Second), done: t0.Add(2 * time.Second), forced: c.forced}}
			r.oldClusterStopped(stopped)
			rec.fragEnds[4] = &ending{at: fence.Add(c.cancel), cause: &cancel.CanceledError{Node: 1, Reason: cancel.Removed}}
			require.Equal(t, 1, m.checkRemovalBound(r.removals()))
			if c.fail == "" {
				require.Empty(t, r.failures)
				return
			}
			require.Len(t, r.failures, 1)
			require.Contains(t, r.failures[0], c.fail)
		})
	}
}
