package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat/epoch"
)

// A cancellation is justified only by the ground truth: a restart or a
// closed registry needs the process to have ended, a death a cut from a
// leader in the process's life.
func TestQueryCheckJudgesCancellationsByTheGroundTruth(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &run{n: 3, hist: newHistory(t0, nil)}
	m := &members{r: r, workers: []uint64{4}, truth: newTruth(r, []uint64{4}), deathBound: 4 * time.Second}
	coord, worker := epoch.New(), epoch.New()
	m.truth.inc[1] = []incarnation{{epoch: coord, up: t0}}
	m.truth.started(4, worker, t0)
	m.truth.samples = []sample{{at: t0.Add(time.Second), cut: map[uint64]bool{}}, {at: t0.Add(2 * time.Second), cut: map[uint64]bool{}}}
	rec := &queryRecord{coord: part{1, coord}, workers: []part{{4, worker}}, start: t0}
	at := t0.Add(3 * time.Second)
	restarted := &ending{at: at, cause: &cancel.CanceledError{Node: 4, OldEpoch: worker, Reason: cancel.Restarted}}
	dead := &ending{at: at, cause: &cancel.CanceledError{Node: 4, OldEpoch: worker, Reason: cancel.Dead}}
	closed := &ending{at: at, cause: cancel.ErrClosed}

	require.Contains(t, m.unjustified(rec, rec.coord, restarted), "still ran", "a restart of a running process")
	require.Contains(t, m.unjustified(rec, rec.coord, dead), "reachable from every leader", "a death of a reachable process")
	require.Contains(t, m.unjustified(rec, rec.workers[0], closed), "registry closed while", "a closed registry of a running process")

	m.truth.samples[1].cut[4] = true
	require.Empty(t, m.unjustified(rec, rec.coord, dead), "a death after a cut")
	m.truth.stopped(4, at)
	require.Empty(t, m.unjustified(rec, rec.coord, restarted), "a restart of an ended process")
	require.Empty(t, m.unjustified(rec, rec.workers[0], closed), "the ended process's registry")
}

// A query that finished while its worker's process still ran has no part
// left to cancel, even when the ground truth dates that process's end
// before the finish: a cut-off worker's fresh epoch ends the old process
// at the sample before the one that shows it. A query that finished after
// its worker's process ended still needs the cancellation.
func TestQueryCheckSparesAQueryFinishedBeforeItsWorkerEnded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		ran  map[uint64]bool
		fail bool
	}{
		{"worker still ran at the finish", map[uint64]bool{1: true, 4: true}, false},
		{"worker had ended at the finish", map[uint64]bool{1: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &run{n: 3, hist: newHistory(t0, nil)}
			m := &members{r: r, workers: []uint64{4}, truth: newTruth(r, []uint64{4}), deathBound: 4 * time.Second, restartBound: 2 * time.Second}
			coord, old, fresh := epoch.New(), epoch.New(), epoch.New()
			m.truth.inc[1] = []incarnation{{epoch: coord, up: t0}}
			m.truth.started(4, old, t0)
			rec := &queryRecord{coord: part{1, coord}, workers: []part{{4, old}}, start: t0.Add(time.Second), fragEnds: map[uint64]*ending{}}
			m.queries = []*queryRecord{rec}
			rec.finish(t0.Add(2*time.Second+10*time.Millisecond), c.ran)
			// The sample at 2.1 s first shows the fresh epoch: the old
			// process is dated to have ended at the one before, 2 s.
			m.truth.mu.Lock()
			m.truth.renewedLocked(4, fresh, t0.Add(2*time.Second))
			m.truth.mu.Unlock()

			m.checkQueries()
			if c.fail {
				require.Len(t, r.failures, 1)
				require.Contains(t, r.failures[0], "worker 4's process ended at 2s and the coordinator's part was never cancelled")
			} else {
				require.Empty(t, r.failures)
			}
		})
	}
}
