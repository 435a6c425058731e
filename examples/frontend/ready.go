package frontend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/metatree/metatree/journal"
)

// Ready returns nil when this frontend may take traffic: it serves, is a
// member of the cluster, knows a leader, has applied what was committed
// when it started, is not stale, and is not shutting down. Otherwise it
// returns ErrNotReady wrapped with the first reason (a health check's
// answer).
func (f *Frontend) Ready() error {
	if reason := f.notReady(); reason != "" {
		return fmt.Errorf("%w: %s", ErrNotReady, reason)
	}
	return nil
}

func (f *Frontend) notReady() string {
	if !f.ready.Load() {
		return "starting"
	}
	if f.draining.Load() {
		return "shutting down"
	}
	st := f.journal.Status()
	member := false
	for _, m := range st.Members {
		member = member || m.ID == st.ID
	}
	switch {
	case st.Removed:
		return "removed from the cluster"
	case !member:
		return "not a member of the cluster yet"
	case errors.Is(st.Err, journal.ErrCorrupt):
		return fmt.Sprintf("corrupt: %v", st.Err)
	case st.Err != nil:
		return fmt.Sprintf("halted: %v", st.Err)
	case st.Leader == 0:
		return "no leader"
	case st.Applied < f.startCommit:
		return fmt.Sprintf("catching up: applied %d of the %d committed at start", st.Applied, f.startCommit)
	}
	if err := f.journal.CheckFresh(); err != nil {
		return err.Error()
	}
	return ""
}

// counted tracks h's requests in flight, so Shutdown can let them finish.
func (f *Frontend) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.inflight.enter()
		defer f.inflight.leave()
		h.ServeHTTP(w, r)
	})
}

// gate counts requests in flight; wait returns once none is.
type gate struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0 (nil: nobody waits)
}

func (g *gate) enter() {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n--; g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return nil
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle, n := g.idle, g.n
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d requests: %w", n, context.Cause(ctx))
	}
}
