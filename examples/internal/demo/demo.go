package demo

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/metatree/metatree/cancel"
)

// FragmentPath is where a worker accepts fragments (POST) and where a
// coordinator withdraws them (DELETE FragmentPath + "/" + query).
const FragmentPath = "/internal/fragments"

// Fragment is what a coordinator sends a worker.
type Fragment struct {
	Query            string `json:"query"`
	Coordinator      uint64 `json:"coordinator"`
	CoordinatorEpoch string `json:"coordinator_epoch"`
	DurationMS       int64  `json:"duration_ms"`
}

// States of a run.
const (
	Running   = "running"
	Finished  = "finished"
	Cancelled = "cancelled"
)

// RunView is a run as the HTTP API shows it. Coordinator fields are set on
// workers only.
type RunView struct {
	ID               string `json:"id,omitempty"`
	Query            string `json:"query,omitempty"`
	Coordinator      uint64 `json:"coordinator,omitempty"`
	CoordinatorEpoch string `json:"coordinator_epoch,omitempty"`
	State            string `json:"state"`
	Cause            string `json:"cause,omitempty"`
	// CancelledAfterMS is how long the run had been going when it was
	// cancelled.
	CancelledAfterMS int64 `json:"cancelled_after_ms,omitempty"`
}

// maxDone bounds the finished and cancelled runs kept for inspection; the
// oldest are forgotten first.
const maxDone = 10000

// ErrExists is returned by Start for a run id already in use.
var ErrExists = errors.New("demo: run exists")

// Runs tracks demo runs. Each running one owns a goroutine that Close stops
// and waits for. Safe for concurrent use.
type Runs struct {
	mu     sync.Mutex
	runs   map[string]*run
	done   []string // ids of ended runs, oldest first
	closed bool
	wg     sync.WaitGroup
}

type run struct {
	view   RunView
	query  *cancel.Query
	stop   context.CancelCauseFunc
	onDone func(RunView)
}

// NewRuns returns an empty set of runs.
func NewRuns() *Runs { return &Runs{runs: make(map[string]*run)} }

// Start runs q for d: the run finishes after d unless q's context is
// cancelled first, in which case its cause is recorded. onDone, if not nil,
// is called once with the final view. An id in use by a running run is
// refused with ErrExists; one whose run ended (finished, cancelled, or
// recorded as never started) is run again: a coordinator whose dispatch
// failed on one worker withdraws the query and may send it again under the
// same id, to the worker that refused it and to those that withdrew it.
func (rs *Runs) Start(id string, view RunView, q *cancel.Query, d time.Duration, onDone func(RunView)) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed {
		q.Finish()
		return errors.New("demo: shutting down")
	}
	if r, ok := rs.runs[id]; ok {
		if r.stop != nil {
			q.Finish()
			return ErrExists
		}
		rs.done = slices.DeleteFunc(rs.done, func(done string) bool { return done == id })
	}
	ctx, stop := context.WithCancelCause(q.Context())
	view.State = Running
	r := &run{view: view, query: q, stop: stop, onDone: onDone}
	rs.runs[id] = r
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		start := time.Now()
		timer := time.NewTimer(d)
		defer timer.Stop()
		state, cause := Finished, ""
		select {
		case <-timer.C:
		case <-ctx.Done():
			state, cause = Cancelled, context.Cause(ctx).Error()
		}
		q.Finish()
		rs.end(id, state, cause, time.Since(start))
	}()
	return nil
}

// Record stores a run that never started (for example a registration that
// failed because its coordinator had already restarted).
func (rs *Runs) Record(id string, view RunView) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if r, ok := rs.runs[id]; ok {
		if r.stop != nil {
			return
		}
		rs.done = slices.DeleteFunc(rs.done, func(done string) bool { return done == id })
	}
	rs.runs[id] = &run{view: view}
	rs.forgetLocked(id)
}

// Cancel cancels a running run with cause.
func (rs *Runs) Cancel(id string, cause error) bool {
	rs.mu.Lock()
	r, ok := rs.runs[id]
	rs.mu.Unlock()
	if !ok || r.stop == nil {
		return false
	}
	r.stop(cause)
	return true
}

func (rs *Runs) end(id, state, cause string, took time.Duration) {
	rs.mu.Lock()
	r := rs.runs[id]
	r.view.State, r.view.Cause = state, cause
	if state == Cancelled {
		r.view.CancelledAfterMS = took.Milliseconds()
	}
	view, onDone := r.view, r.onDone
	r.stop(nil)
	r.stop = nil
	rs.forgetLocked(id)
	rs.mu.Unlock()
	if onDone != nil {
		onDone(view)
	}
}

// forgetLocked notes that id ended and drops the oldest ended runs beyond
// maxDone.
func (rs *Runs) forgetLocked(id string) {
	rs.done = append(rs.done, id)
	for len(rs.done) > maxDone {
		delete(rs.runs, rs.done[0])
		rs.done = rs.done[1:]
	}
}

// Get returns one run.
func (rs *Runs) Get(id string) (RunView, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.runs[id]
	if !ok {
		return RunView{}, false
	}
	return r.view, true
}

// List returns every run, ordered by id.
func (rs *Runs) List() []RunView {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make([]RunView, 0, len(rs.runs))
	for _, r := range rs.runs {
		out = append(out, r.view)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID+out[i].Query < out[j].ID+out[j].Query })
	return out
}

// Close cancels every running run and waits for their goroutines.
func (rs *Runs) Close() {
	rs.mu.Lock()
	rs.closed = true
	for _, r := range rs.runs {
		if r.stop != nil {
			r.stop(errors.New("demo: shutting down"))
		}
	}
	rs.mu.Unlock()
	rs.wg.Wait()
}
