package frontendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/metatree/metatree/examples/frontend"
)

// pollEvery is how often the kit re-checks a condition it waits for: the
// cluster's state changes on raft ticks and heartbeat rounds, which the
// kit has no channel for. Inside a testing/synctest bubble it is virtual
// time.
const pollEvery = 10 * time.Millisecond

// await waits until cond holds, or for ctx; what names the condition in
// the error.
func (c *Cluster) await(ctx context.Context, what string, cond func() bool) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("frontendtest: waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// permanent marks an error retry must not retry.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// retry runs op until it succeeds, returns a permanent error, or ctx ends;
// what names the operation in the error.
func (c *Cluster) retry(ctx context.Context, what string, op func() error) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		err := op()
		if err == nil {
			return nil
		}
		if p, ok := errors.AsType[permanent](err); ok {
			return p.error
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("frontendtest: %s: %w (last error: %w)", what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// running returns the running frontends in index order.
func (c *Cluster) running() []*frontend.Frontend {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]int, 0, len(c.fes))
	for i := range c.fes {
		ids = append(ids, i)
	}
	slices.Sort(ids)
	fes := make([]*frontend.Frontend, len(ids))
	for k, i := range ids {
		fes[k] = c.fes[i]
	}
	return fes
}

// anyFrontend returns the running frontend of lowest index, or nil.
func (c *Cluster) anyFrontend() *frontend.Frontend {
	if fes := c.running(); len(fes) > 0 {
		return fes[0]
	}
	return nil
}
