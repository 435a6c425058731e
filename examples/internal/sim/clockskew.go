package sim

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/metatree/metatree/internal/clock"
	"github.com/metatree/metatree/journal"
)

// clocks are the members' wall clocks. Each process a member runs starts
// on a clock.Stepped set off by the member's skew at that moment, and
// keeps that offset for its life: the processes' wall clocks disagree,
// and a member's clock can be set (forward or back) between two of its
// processes. A running process's clock is never stepped: inside the
// bubble time.Now has no monotonic reading, so a step would move its
// every interval and timer too, which a real machine's step does not
// (see the package doc for what reads the wall clock, and how a step in
// a process's life is tested instead).
type clocks struct {
	mu   sync.Mutex
	skew map[uint64]time.Duration
}

func newClocks() *clocks { return &clocks{skew: map[uint64]time.Duration{}} }

// clock is frontendtest.Options.Clock: the clock a process of member i
// starts on.
func (c *clocks) clock(i uint64) journal.Clock {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &clock.Stepped{}
	s.Step(c.skew[i])
	return s
}

// set sets member i's skew for its next processes.
func (c *clocks) set(i uint64, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skew[i] = d
}

// skewClock sets a member's wall clock off from the others, by up to 20
// s either way (well within the journal's StaleAfter), or, one time in
// five, by up to two minutes (beyond it: an operator's error, under
// which a frontend's local reads may be refused or served stale, and
// nothing else may break). A frontend restarts on it at once (its
// machine's clock was set while it restarted); a worker's next process
// (the worker nemesis's restarts) runs on it.
func (r *run) skewClock(ctx context.Context, rng *rand.Rand) {
	bound := 20 * time.Second
	if rng.IntN(5) == 0 {
		bound = 2 * time.Minute
	}
	d := time.Duration(rng.Int64N(int64(2*bound))) - bound
	d = d.Round(time.Millisecond)
	if w := r.runningWorkers(); len(w) > 0 && rng.IntN(3) == 0 {
		id := w[rng.IntN(len(w))]
		r.hist.fault("clock of worker %d off by %v from its next restart", id, d)
		r.clocks.set(id, d)
		return
	}
	i := r.pick(rng)
	r.hist.fault("clock of %d off by %v, restart", i, d)
	r.clocks.set(uint64(i), d)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = r.c.ShutdownFrontend(sctx, i) // its hand-off may fail under partitions; Close still runs
	cancel()
	r.restart(ctx, i, "on a skewed clock")
}
