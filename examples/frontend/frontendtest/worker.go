package frontendtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/responder"
)

// ErrInvalidWorker is the error of AddWorker for an id that is zero, a
// frontend's or an existing worker's, and of RestartWorker and ReaddWorker
// for an id that was never added.
var ErrInvalidWorker = errors.New("frontendtest: invalid worker")

// Worker is a worker as the example worker binary runs one: a heartbeat
// responder with this process's epoch, mounted at responder.Path on the
// Cluster's Network, feeding a cancel registry that its fragments register
// with. A restart is a new Worker with a new epoch at the same address.
// Its methods are safe for concurrent use.
type Worker struct {
	id        uint64
	addr      string
	responder *responder.Responder
	registry  *cancel.Registry
	srv       *http.Server
	served    chan struct{}
	closeOnce sync.Once
}

// WorkerAddr is worker id's address.
func WorkerAddr(id uint64) string { return fmt.Sprintf("worker-%d:9100", id) }

// startWorker serves worker id on the network with a fresh epoch.
func (c *Cluster) startWorker(id uint64) (*Worker, error) {
	registry := cancel.New(cancel.Config{})
	resp, err := responder.New(responder.Config{
		ID:      id,
		Epoch:   epoch.New(),
		Token:   c.opts.Config.Token,
		OnEvent: func(ev epoch.Event) { registry.Apply(ev) },
		Clock:   c.clock(id),
	})
	if err != nil {
		_ = registry.Close()
		return nil, fmt.Errorf("frontendtest: worker %d: %w", id, err)
	}
	ln, err := c.net.Listen(WorkerAddr(id))
	if err != nil {
		_ = registry.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(responder.Path, resp)
	w := &Worker{
		id: id, addr: WorkerAddr(id), responder: resp, registry: registry,
		srv:    &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		served: make(chan struct{}),
	}
	go func() {
		defer close(w.served)
		_ = w.srv.Serve(ln)
	}()
	return w, nil
}

// ID is the worker's member id.
func (w *Worker) ID() uint64 { return w.id }

// Addr is the worker's address (WorkerAddr).
func (w *Worker) Addr() string { return w.addr }

// Epoch is this worker process's current epoch: the one it drew at start,
// or, once the log recorded that epoch's end (the worker was declared dead
// while cut off), the fresh one it drew when the leader told it so.
func (w *Worker) Epoch() epoch.Epoch { return w.responder.Epoch() }

// Registry is the worker's cancel registry: a fragment registered in it
// (cancel.Registry.RegisterFragment) is cancelled when its coordinator
// restarts, dies or is removed.
func (w *Worker) Registry() *cancel.Registry { return w.registry }

// Responder is the worker's heartbeat responder: the frontends' epochs as
// the leader's heartbeats list them.
func (w *Worker) Responder() *responder.Responder { return w.responder }

// close stops serving at once, as a killed process does (open connections
// drop), and cancels the fragments with cancel.ErrClosed.
func (w *Worker) close() {
	w.closeOnce.Do(func() {
		_ = w.srv.Close()
		<-w.served
		_ = w.registry.Close()
	})
}

// AddWorker starts worker id (non-zero, neither a frontend's index nor an
// existing worker's) on the network, adds it as a heartbeat member through
// a running frontend, and returns once every running frontend's cancel
// registry knows the worker at its epoch and the worker has heard every
// running frontend from the leader: a query may then span it.
func (c *Cluster) AddWorker(ctx context.Context, id uint64) (*Worker, error) {
	c.mu.Lock()
	_, exists := c.workers[id]
	_, joined := c.joined[int(id)]
	c.mu.Unlock()
	if id == 0 || id <= uint64(c.frontends()) || exists || joined {
		return nil, fmt.Errorf("%w: id %d: want a new id above the frontends' 1..%d", ErrInvalidWorker, id, c.frontends())
	}
	return c.startAndRecordWorker(ctx, id, "add")
}

// startAndRecordWorker starts worker id's process, adds its member record
// through a running frontend (a record still there is kept, for the new
// process to take over) and waits as AddWorker does; verb names the
// operation in errors.
func (c *Cluster) startAndRecordWorker(ctx context.Context, id uint64, verb string) (*Worker, error) {
	w, err := c.startWorker(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.workers[id] = w
	c.mu.Unlock()
	m := heartbeat.Member{ID: id, Addr: w.addr, Kind: epoch.KindWorker, Role: "worker"}
	if err := c.retry(ctx, fmt.Sprintf("%s worker %d", verb, id), func() error {
		f := c.anyFrontend()
		if f == nil {
			return errors.New("no frontend runs")
		}
		err := f.AddMember(ctx, m)
		if errors.Is(err, heartbeat.ErrExists) {
			return nil
		}
		return err
	}); err != nil {
		return nil, err
	}
	return w, c.AwaitWorker(ctx, id)
}

// Worker is worker id, or nil while it is stopped.
func (c *Cluster) Worker(id uint64) *Worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.workers[id]
}

// StopWorker stops worker id at once, as a crash does: the leader misses
// its heartbeats and, after Config.DeadAfter of them, declares it dead.
// Its member record stays.
func (c *Cluster) StopWorker(id uint64) {
	c.mu.Lock()
	w := c.workers[id]
	c.workers[id] = nil
	c.mu.Unlock()
	if w != nil {
		w.close()
	}
}

// RestartWorker stops worker id (if running) and starts it again at its
// address with a new epoch. It returns once every running frontend's
// cancel registry knows the new epoch (AwaitWorker): the queries that ran
// on the old one are cancelled by then.
func (c *Cluster) RestartWorker(ctx context.Context, id uint64) (*Worker, error) {
	c.mu.Lock()
	_, added := c.workers[id]
	c.mu.Unlock()
	if !added {
		return nil, fmt.Errorf("%w: no worker %d was added", ErrInvalidWorker, id)
	}
	c.StopWorker(id)
	w, err := c.startWorker(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.workers[id] = w
	c.mu.Unlock()
	return w, c.AwaitWorker(ctx, id)
}

// AwaitWorker waits until every running frontend's cancel registry knows
// running worker id alive at its current epoch, and the worker has heard
// every running frontend at its current epoch from the leader.
func (c *Cluster) AwaitWorker(ctx context.Context, id uint64) error {
	return c.await(ctx, fmt.Sprintf("worker %d known to every frontend and knowing them", id), func() bool {
		w := c.Worker(id)
		if w == nil {
			return false
		}
		for _, f := range c.running() {
			n, ok := f.Registry().Node(id)
			if !ok || n.Epoch != w.Epoch() || n.Status != cancel.StatusAlive {
				return false
			}
			fe, ok := w.responder.Frontend(f.ID())
			if !ok || fe.Epoch != f.Epoch() {
				return false
			}
		}
		return true
	})
}

// closeWorkers stops every worker.
func (c *Cluster) closeWorkers() {
	c.mu.Lock()
	ws := c.workers
	c.workers = map[uint64]*Worker{}
	c.mu.Unlock()
	for _, w := range ws {
		if w != nil {
			w.close()
		}
	}
}
