package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat/epoch"
)

// The event log keeps each change of a registry's view once, per
// frontend process, and a failed "never cancelled" check prints the
// member's processes, what the coordinator's registry saw of it, and the
// samples around its end.
func TestEventLogExplainsANeverCancelledQuery(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &run{n: 3, hist: newHistory(t0, nil)}
	m := &members{r: r, workers: []uint64{4}, truth: newTruth(r, []uint64{4}), deathBound: 4 * time.Second, restartBound: 2 * time.Second}
	coord, old, fresh := epoch.New(), epoch.New(), epoch.New()
	m.truth.inc[1] = []incarnation{{epoch: coord, up: t0}}
	m.truth.started(4, old, t0)
	m.truth.stopped(4, t0.Add(3*time.Second))
	m.truth.started(4, fresh, t0.Add(3*time.Second))
	for k := range 80 {
		at := t0.Add(time.Duration(k) * sampleEvery)
		s := sample{at: at, leader: 2, quorum: true, clean: map[uint64]bool{1: true, 2: true, 4: true}, cut: map[uint64]bool{}}
		if at.After(t0.Add(3*time.Second)) && at.Before(t0.Add(5*time.Second)) {
			s.leader, s.quorum = 0, false // no leader while the worker restarts
		}
		m.truth.samples = append(m.truth.samples, s)
	}
	alive := regView{at: t0.Add(100 * time.Millisecond), frontend: 1, fepoch: coord, member: 4, known: true,
		state: cancel.NodeState{Node: 4, Epoch: old, Status: cancel.StatusAlive, Index: 12}}
	m.truth.log.observe(alive)
	again := alive
	again.at = t0.Add(200 * time.Millisecond)
	m.truth.log.observe(again) // no change: not kept
	other := alive
	other.frontend = 2
	m.truth.log.observe(other) // another frontend's registry
	require.Len(t, m.truth.log.of(1, coord, 4), 1)

	rec := &queryRecord{coord: part{1, coord}, workers: []part{{4, old}}, start: t0.Add(time.Second), fragEnds: map[uint64]*ending{}}
	m.queries = []*queryRecord{rec}
	rec.finish(t0.Add(7*time.Second), map[uint64]bool{1: true})
	m.checkQueries()

	require.NotEmpty(t, r.failures)
	f := r.failures[len(r.failures)-1]
	require.Contains(t, f, "worker 4's process ended at 3s and the coordinator's part was never cancelled")
	require.Contains(t, f, "query started at 1s, finished at 7s")
	require.Contains(t, f, "member 4's processes: "+short(old)+" 0s..3s (the query's); "+short(fresh)+" 3s..running;")
	require.Contains(t, f, "frontend 1's registry (process "+short(coord)+") saw member 4: 100ms alive "+short(old)+" @12;")
	require.Contains(t, f, "3.1s leader 0 quorum false")
	require.Contains(t, f, "5s leader 2 quorum true")
}
