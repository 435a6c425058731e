package sim

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/examples/frontend/frontendtest"
	"github.com/metatree/metatree/heartbeat/epoch"
)

// part is one member's process in a query: the coordinator frontend or a
// worker, at the epoch the query was registered against.
type part struct {
	node  uint64
	epoch epoch.Epoch
}

// ending is one cancellation of a query's part: when, and its cause.
type ending struct {
	at    time.Time
	cause error
}

// queryRecord is one query the run registered: its parts, when it
// started and was finished, and when and why each of its contexts (the
// coordinator's, and each worker's fragment) was cancelled.
type queryRecord struct {
	q       *frontendtest.Query
	coord   part
	workers []part
	start   time.Time

	mu        sync.Mutex
	finished  time.Time
	coordEnd  *ending
	fragEnds  map[uint64]*ending
	finishing bool
	// ranAtFinish holds the members whose process of the query still ran
	// when it finished: nothing of the query was left to cancel for them.
	// The ground truth dates a cut-off worker's end at the sample before
	// the one that shows its fresh epoch, which can precede a finish that
	// came while the old process still ran.
	ranAtFinish map[uint64]bool
}

// queryLoop starts queries on random running frontends spanning random
// running workers, each held for a while in its own goroutine, until the
// run stops querying.
func (m *members) queryLoop(ctx context.Context, rng *rand.Rand) {
	for {
		select {
		case <-m.stopping:
			return
		default:
		}
		if !pause(ctx, time.Duration(50+rng.IntN(500))*time.Millisecond) {
			return
		}
		up := m.r.running()
		if len(up) == 0 {
			continue
		}
		i := up[rng.IntN(len(up))]
		var ws []uint64
		for _, id := range m.workers {
			if m.r.c.Worker(id) != nil && rng.IntN(3) > 0 {
				ws = append(ws, id)
			}
		}
		if len(ws) == 0 {
			continue
		}
		rec := m.startQuery(ctx, i, ws, rng.IntN(3) == 0)
		if rec == nil {
			continue
		}
		hold := time.Duration(200+rng.IntN(6000)) * time.Millisecond
		m.loops.Go(func() { m.hold(ctx, rec, hold) })
	}
}

// parts returns the processes a query on frontend i and workers ws is
// registered against now, or false if one is not running.
func (m *members) parts(i int, ws []uint64) (part, []part, bool) {
	f := m.r.c.Frontend(i)
	if f == nil {
		return part{}, nil, false
	}
	coord := part{uint64(i), f.Epoch()}
	var out []part
	for _, id := range ws {
		w := m.r.c.Worker(id)
		if w == nil {
			return part{}, nil, false
		}
		out = append(out, part{id, w.Epoch()})
	}
	return coord, out, true
}

// published reports whether the coordinator's registry knows each of the
// workers alive at the epoch it runs (unless ahead), and each worker knows
// the coordinator at its epoch from the leader's heartbeats. A coordinator
// dispatches against epochs the cluster published; with ahead, against a
// worker's epoch that some frontend's member records show but its own
// registry may not have heard of yet (a member view ahead of the events:
// the registry orders such a part after the events it applied, cancel's
// "ahead" parts). An epoch no record ever showed is never dispatched
// against: if its process ends before a heartbeat names it, no event about
// it reaches any registry, and a part on it would never be cancelled.
func (m *members) published(coord part, workers []part, ahead bool) bool {
	f := m.r.c.Frontend(int(coord.node))
	if f == nil || f.Epoch() != coord.epoch {
		return false
	}
	for _, w := range workers {
		n, ok := f.Registry().Node(w.node)
		if !ok || (!ahead && (n.Epoch != w.epoch || n.Status != cancel.StatusAlive)) {
			return false
		}
		if ahead && !m.recorded(w) {
			return false
		}
		cw := m.r.c.Worker(w.node)
		if cw == nil {
			return false
		}
		fe, ok := cw.Responder().Frontend(coord.node)
		if !ok || fe.Epoch != coord.epoch {
			return false
		}
	}
	return true
}

// startQuery starts a query on frontend i spanning workers ws, if their
// epochs are published, and records it. A start that fails (a member
// restarted or unreachable meanwhile) is no finding; a start whose
// members changed while it ran is dropped, as its epochs are then not
// known for sure.
func (m *members) startQuery(ctx context.Context, i int, ws []uint64, ahead bool) *queryRecord {
	coord, workers, ok := m.parts(i, ws)
	if !ok || !m.published(coord, workers, ahead) {
		return nil
	}
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	q, err := m.r.c.StartQuery(sctx, i, ws...)
	cancel()
	if err != nil {
		m.r.hist.event("query on %d %v: %v", i, ws, err)
		return nil
	}
	coord2, workers2, ok := m.parts(i, ws)
	if !ok || coord2 != coord || !slices.Equal(workers, workers2) {
		q.Finish()
		return nil
	}
	rec := &queryRecord{q: q, coord: coord, workers: workers, start: start, fragEnds: map[uint64]*ending{}}
	context.AfterFunc(q.Context(), func() { rec.ended(0, q.Context()) })
	for _, w := range workers {
		fctx := q.Fragment(w.node)
		context.AfterFunc(fctx, func() { rec.ended(w.node, fctx) })
	}
	m.mu.Lock()
	m.queries = append(m.queries, rec)
	m.mu.Unlock()
	m.r.hist.event("query on %d %v", i, ws)
	return rec
}

// ended records the cancellation of the coordinator's context (node 0)
// or of a fragment's, unless the run is finishing the query itself.
func (rec *queryRecord) ended(node uint64, ctx context.Context) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.finishing {
		return
	}
	e := &ending{at: time.Now(), cause: context.Cause(ctx)}
	if node == 0 {
		rec.coordEnd = e
	} else {
		rec.fragEnds[node] = e
	}
}

// hold keeps a query for d; then, while one of its members' processes
// has ended and the query still runs on another member (a cancellation is
// due), until that cancellation or the run's final deadline; then it
// finishes the query.
func (m *members) hold(ctx context.Context, rec *queryRecord, d time.Duration) {
	select {
	case <-time.After(d):
	case <-m.stopping:
	case <-ctx.Done():
	}
	for m.due(rec) {
		select {
		case <-time.After(sampleEvery):
		case <-m.final:
			m.finishQuery(rec)
			return
		case <-ctx.Done():
			m.finishQuery(rec)
			return
		}
	}
	m.finishQuery(rec)
}

// due reports whether a cancellation of the query is due and has not
// come: a member's process ended and a context that depends on it still
// runs.
func (m *members) due(rec *queryRecord) bool {
	running := m.running(rec)
	workerGone := false
	for _, w := range rec.workers {
		if !running[w.node] {
			workerGone = true
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if workerGone && rec.coordEnd == nil {
		return true
	}
	if !running[rec.coord.node] {
		for _, w := range rec.workers {
			if rec.fragEnds[w.node] == nil {
				return true
			}
		}
	}
	return false
}

// anyDue reports whether a cancellation of some unfinished query is due.
func (m *members) anyDue() bool {
	m.mu.Lock()
	qs := m.queries
	m.mu.Unlock()
	for _, rec := range qs {
		rec.mu.Lock()
		finishing := rec.finishing
		rec.mu.Unlock()
		if !finishing && m.due(rec) {
			return true
		}
	}
	return false
}

// finishQuery ends the query; cancellations from here on are its own.
func (m *members) finishQuery(rec *queryRecord) {
	rec.finish(time.Now(), m.running(rec))
	rec.q.Finish()
}

// finish records that the query finished at at, with the members in
// running still on its processes.
func (rec *queryRecord) finish(at time.Time, running map[uint64]bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.finishing = true
	rec.finished = at
	rec.ranAtFinish = running
}

// running returns the query's members whose process of the query runs
// now: the coordinator's frontend and each worker at the epoch the query
// was registered against.
func (m *members) running(rec *queryRecord) map[uint64]bool {
	running := map[uint64]bool{}
	if f := m.r.c.Frontend(int(rec.coord.node)); f != nil && f.Epoch() == rec.coord.epoch {
		running[rec.coord.node] = true
	}
	for _, w := range rec.workers {
		if cw := m.r.c.Worker(w.node); cw != nil && cw.Epoch() == w.epoch {
			running[w.node] = true
		}
	}
	return running
}

// recorded reports whether some running frontend's member records show
// worker part w's epoch.
func (m *members) recorded(w part) bool {
	for _, i := range m.r.running() {
		if f := m.r.c.Frontend(i); f != nil {
			if rec, ok := f.Members().Member(w.node); ok && rec.Epoch == w.epoch {
				return true
			}
		}
	}
	return false
}
