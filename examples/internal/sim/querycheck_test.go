package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat"
)

// A cancellation is justified only by the ground truth: a restart or a
// closed registry needs the process to have ended, a death a cut from a
// leader in the process's life.
func TestQueryCheckJudgesCancellationsByTheGroundTruth(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &run{n: 3, hist: newHistory(t0, nil)}
	m := &members{r: r, workers: []uint64{4}, truth: newTruth(r, []uint64{4}), deathBound: 4 * time.Second}
	coord, worker := heartbeat.NewEpoch(), heartbeat.NewEpoch()
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
