package sim

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/metatree/metatree/examples/frontend/frontendtest"
)

// members are a run's workers, the queries registered across them and a
// coordinator frontend, and the worker faults; truth is their ground
// truth. Every run has them: one to three workers, drawn from the seed.
type members struct {
	r       *run
	workers []uint64
	truth   *truth
	// restartBound and deathBound are the README's bounds, in simulated
	// time, from a worker's restart or stop to its queries' cancellation.
	restartBound, deathBound time.Duration

	cancel   context.CancelFunc // ends the sampler, the faults and the queries
	stopping chan struct{}      // closed: no new query, no new fault
	final    chan struct{}      // closed: a query waiting for its cancellation gives up
	faults   sync.WaitGroup     // the worker nemesis
	// op is held (a token sent) by a worker fault and by removeWorker: a
	// channel, since a goroutine waiting on a mutex stops a synctest
	// bubble's clock.
	op    chan struct{}
	loops sync.WaitGroup // the query clients, holders and sampler

	mu      sync.Mutex
	queries []*queryRecord
}

// querying is how many clients start queries.
const querying = 2

// startMembers adds the run's workers and starts the ground truth's
// sampler, the query clients and, for d, the worker nemesis.
func (r *run) startMembers(ctx context.Context, d time.Duration) *members {
	cfg := r.cfg.WithDefaults()
	rng := rand.New(rand.NewPCG(r.opts.Seed, 0x3e3b))
	k := 1 + rng.IntN(3)
	m := &members{
		r:            r,
		restartBound: 2 * cfg.HeartbeatInterval,
		deathBound:   4 * cfg.HeartbeatInterval,
		stopping:     make(chan struct{}),
		op:           make(chan struct{}, 1),
		final:        make(chan struct{}),
	}
	for w := range k {
		m.workers = append(m.workers, uint64(r.n+1+w))
	}
	m.truth = newTruth(r, m.workers)
	ctx, m.cancel = context.WithCancel(ctx)
	m.loops.Go(func() { m.truth.sampleLoop(ctx) })
	for _, id := range m.workers {
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		w, err := r.c.AddWorker(actx, id)
		cancel()
		if err != nil {
			r.failf("add worker %d: %v", id, err)
			continue
		}
		m.truth.started(id, w.Epoch(), time.Now())
	}
	for q := range querying {
		qrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(q)))
		m.loops.Go(func() { m.queryLoop(ctx, qrng) })
	}
	frng := rand.New(rand.NewPCG(rng.Uint64(), 0xfa))
	m.faults.Go(func() { m.nemesis(ctx, frng, d) })
	return m
}

// endFaults stops the worker nemesis and new queries, and brings every
// worker back: running and on the network.
func (m *members) endFaults(ctx context.Context) {
	close(m.stopping)
	m.faults.Wait()
	net := m.r.c.Network()
	for _, id := range m.workers {
		net.SetDown(frontendtest.WorkerAddr(id), false)
		if m.r.c.Worker(id) == nil {
			m.restartWorker(ctx, id, time.Minute)
		}
	}
}

// finish, on a healed cluster, gives the cancellations still due the
// death bound and a heartbeat to land, then ends every query and the
// sampler. A sole voter's disk may still be slow (it stays slow through
// the recovery): every commit of the monitor's (its claim, the
// transitions) then takes fsyncs longer than a heartbeat interval, so
// the cancellations still due get up to RecoveryBound more, as a write
// does.
func (m *members) finish(ctx context.Context) {
	pause(ctx, m.deathBound+m.restartBound)
	for limit := time.Now().Add(RecoveryBound); m.r.diskSlow.Load() && m.anyDue() && time.Now().Before(limit); {
		if !pause(ctx, sampleEvery) {
			break
		}
	}
	close(m.final)
	m.cancel()
	m.loops.Wait()
}

// nemesis injects worker faults for d: restarts (one, or two in a row
// before the cluster has seen the first), stops longer than the death
// bound, and a worker cut off the network for a while. The frontends'
// nemesis restarts and cuts the coordinators meanwhile.
func (m *members) nemesis(ctx context.Context, rng *rand.Rand, d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		select {
		case <-m.stopping:
			return
		default:
		}
		if !pause(ctx, time.Duration(1000+rng.IntN(5000))*time.Millisecond) {
			return
		}
		select {
		case m.op <- struct{}{}:
		case <-ctx.Done():
			return
		}
		m.fault(ctx, rng)
		<-m.op
	}
}

// fault injects one worker fault.
func (m *members) fault(ctx context.Context, rng *rand.Rand) {
	net := m.r.c.Network()
	id := m.workers[rng.IntN(len(m.workers))]
	switch p := rng.IntN(100); {
	case p < 30:
		m.r.hist.fault("restart worker %d", id)
		m.restartWorker(ctx, id, 10*time.Second)
	case p < 55:
		first := time.Duration(rng.IntN(300)) * time.Millisecond
		m.r.hist.fault("restart worker %d twice, %v apart", id, first)
		m.restartWorker(ctx, id, first)
		m.restartWorker(ctx, id, 10*time.Second)
	case p < 75:
		down := m.deathBound + time.Duration(rng.IntN(4000))*time.Millisecond
		m.r.hist.fault("stop worker %d for %v", id, down)
		m.truth.stopping(id, time.Now())
		m.r.c.StopWorker(id)
		pause(ctx, down)
		m.restartWorker(ctx, id, 10*time.Second)
	default:
		cut := time.Duration(500+rng.IntN(6000)) * time.Millisecond
		m.r.hist.fault("cut worker %d off for %v", id, cut)
		net.SetDown(frontendtest.WorkerAddr(id), true)
		pause(ctx, cut)
		net.SetDown(frontendtest.WorkerAddr(id), false)
	}
}

// restartWorker restarts worker id (or starts it, if stopped), recording
// both in the ground truth, and waits up to wait for every frontend to
// know the new process: a short wait leaves the cluster still learning of
// it, for a second restart to land on.
func (m *members) restartWorker(ctx context.Context, id uint64, wait time.Duration) {
	at := time.Now()
	m.truth.stopping(id, at)
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, _ = m.r.c.RestartWorker(rctx, id) // the wait fails under partitions; the restart happened
	if w := m.r.c.Worker(id); w != nil {
		m.truth.started(id, w.Epoch(), at)
	}
}
