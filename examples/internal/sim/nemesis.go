package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/examples/frontend/frontendtest"
)

// nemesis injects faults, one at a time, for d of simulated time, and
// returns how many. Every choice comes from rng. A fault that stops a
// frontend starts it again before the next fault, so at most one
// frontend is down at a time (a quorum of three or more survives it);
// partitions and link faults last until a later fault heals them.
func (r *run) nemesis(ctx context.Context, rng *rand.Rand, d time.Duration) int {
	end := time.Now().Add(d)
	n := 0
	for time.Now().Before(end) && ctx.Err() == nil {
		if !pause(ctx, time.Duration(500+rng.IntN(4000))*time.Millisecond) {
			break
		}
		n++
		if !r.recoverFromDisaster(ctx) {
			r.fault(ctx, rng)
		}
	}
	return n
}

// pause waits d of virtual time, or for ctx.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// pick returns a random member frontend's index.
func (r *run) pick(rng *rand.Rand) int {
	ids := r.ids()
	return ids[rng.IntN(len(ids))]
}

// others returns every member frontend's index but i.
func (r *run) others(i int) []int {
	var out []int
	for _, j := range r.ids() {
		if j != i {
			out = append(out, j)
		}
	}
	return out
}

func addrs(is []int) []string {
	out := make([]string, len(is))
	for k, i := range is {
		out[k] = frontendtest.Addr(i)
	}
	return out
}

// leader returns the index of a frontend that considers itself leader,
// or 0.
func (r *run) leader() int {
	for _, i := range r.running() {
		if f := r.c.Frontend(i); f != nil && f.Journal().Status().IsLeader() {
			return i
		}
	}
	return 0
}

func (r *run) fault(ctx context.Context, rng *rand.Rand) {
	net := r.c.Network()
	switch p := rng.IntN(160); {
	case p < 12: // isolate one frontend, often the leader
		i := r.pick(rng)
		if l := r.leader(); l != 0 && rng.IntN(2) == 0 {
			i = l
		}
		r.hist.fault("isolate %d", i)
		r.c.Partition(i, r.others(i)...)
	case p < 20: // split a minority from the majority
		ids := r.ids()
		perm := rng.Perm(len(ids))
		var minority []int
		for _, a := range perm[:(len(ids)-1)/2] {
			minority = append(minority, ids[a])
		}
		r.hist.fault("split %v", minority)
		for _, a := range minority {
			for _, b := range perm[(len(ids)-1)/2:] {
				r.c.Partition(a, ids[b])
			}
		}
	case p < 30: // one-way: a frontend's messages reach nobody, or nobody's reach it
		i := r.pick(rng)
		if l := r.leader(); l != 0 && rng.IntN(2) == 0 {
			i = l
		}
		if rng.IntN(2) == 0 {
			r.hist.fault("one-way out of %d", i)
			net.CutOneWay(frontendtest.Addr(i), addrs(r.others(i))...)
		} else {
			r.hist.fault("one-way into %d", i)
			for _, o := range r.others(i) {
				net.CutOneWay(frontendtest.Addr(o), frontendtest.Addr(i))
			}
		}
	case p < 36: // a flapping link
		a := r.pick(rng)
		b := r.other(rng, a)
		flaps := 2 + rng.IntN(6)
		r.hist.fault("flap %d-%d x%d", a, b, flaps)
		for range flaps {
			r.c.Partition(a, b)
			if !pause(ctx, time.Duration(50+rng.IntN(700))*time.Millisecond) {
				break
			}
			net.Heal()
			if !pause(ctx, time.Duration(50+rng.IntN(700))*time.Millisecond) {
				break
			}
		}
	case p < 44: // slow and lossy links
		for range 1 + rng.IntN(3) {
			a := r.pick(rng)
			b := r.other(rng, a)
			f := frontendtest.Faults{
				Delay:  time.Duration(rng.IntN(50)) * time.Millisecond,
				Jitter: time.Duration(1+rng.IntN(100)) * time.Millisecond,
				Reset:  float64(rng.IntN(3)) / 100,
			}
			r.hist.fault("link %d->%d %+v", a, b, f)
			net.SetFaults(frontendtest.Addr(a), frontendtest.Addr(b), f)
		}
	case p < 56: // heal everything
		r.hist.fault("heal")
		net.Heal()
		net.ClearFaults()
	case p < 61: // a crash loop: short lives, each read from at once
		r.crashLoop(ctx, rng)
	case p < 66: // power cut, restart after a while
		i := r.pick(rng)
		down := time.Duration(200+rng.IntN(5000)) * time.Millisecond
		r.hist.fault("crash %d for %v", i, down)
		if err := r.c.Crash(i); err != nil {
			r.failf("crash frontend %d: %v", i, err)
			return
		}
		pause(ctx, down)
		r.restart(ctx, i, "after a power cut")
	case p < 72: // graceful restart
		i := r.pick(rng)
		r.hist.fault("shutdown %d", i)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = r.c.ShutdownFrontend(sctx, i) // its hand-off may fail under partitions; Close still runs
		cancel()
		pause(ctx, time.Duration(rng.IntN(3000))*time.Millisecond)
		r.restart(ctx, i, "after a shutdown")
	case p < 82: // leadership hand-off to a random voter
		l := r.leader()
		if l == 0 {
			return
		}
		to := r.other(rng, l)
		r.hist.fault("transfer %d->%d", l, to)
		if f := r.c.Frontend(l); f != nil {
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = f.Journal().TransferLeadership(tctx, uint64(to)) // may fail under partitions
			cancel()
		}
	case p < 90: // checkpoint on a random frontend
		i := r.pick(rng)
		r.hist.fault("checkpoint %d", i)
		if f := r.c.Frontend(i); f != nil {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, _ = f.Checkpointer().Checkpoint(cctx) // the leader's is disabled; others may lag
			cancel()
			r.checkImagesNow(ctx, i)
		}
	case p < 100: // a lagging frontend catches up from an image
		r.lagBehindImage(ctx, rng)
	case p < 106: // a slow disk, or a fast one again
		r.slowDisk(rng)
	case p < 114: // the leader's power cut right after a write, a lagging reader at once
		r.crashAfterWrite(ctx, rng)
	case p < 120: // a client's retry with the same key lands across an image
		r.retryAcrossImage(ctx, rng)
	case p < 130: // links that deliver requests twice, the copies late
		r.duplicateLinks(rng)
	case p < 138: // a member's wall clock set off from the others
		r.skewClock(ctx, rng)
	case p < 146: // a full disk, then space again
		r.fullDisk(ctx, rng)
	case p < 150: // an operator promotes an observer
		r.promote(ctx, rng)
	default: // an operator adds or removes a member
		r.membership(ctx, rng)
	}
}

// slowDisk makes the sole voter's WAL fsyncs (entries, term and vote)
// take longer than the election timeout, or makes its disk fast again. A
// slow disk stays slow across power cuts and through the recovery: it
// must delay elections and writes, not prevent them. Only a sole voter's
// disk is slowed: the journal's store holds its lock across the fsync of
// an append that overwrites the log's tail, which a follower runs and a
// sole voter never does, and a goroutine waiting on a lock (raft's reads)
// stops a synctest bubble's clock for good.
func (r *run) slowDisk(rng *rand.Rand) {
	if r.voters != 1 || r.promoted.Load() {
		return
	}
	fs := r.c.FS(1)
	if fs == nil {
		return
	}
	if rng.IntN(3) == 0 {
		r.hist.fault("disk of 1 fast")
		fs.SetSyncDelay(0, "")
		r.diskSlow.Store(false)
		return
	}
	d := time.Duration(1500+rng.IntN(700)) * time.Millisecond
	r.hist.fault("disk of 1 slow: fsync %v", d)
	r.diskSlow.Store(true)
	fs.SetSyncDelay(d, ".log")
}

// crashAfterWrite writes through the leader while its link to another
// frontend (the reader) is cut one way, so the reader lags; cuts the
// leader's power right after the acknowledgement, a sole voter's
// sometimes on a slow disk; restarts it, heals, and reads the register through the reader at
// once, again and again until a read completes. A leader's commit index
// on disk can lag what it acknowledged (a commit-only HardState is not
// synced); with a sole voter, nobody else holds it.
func (r *run) crashAfterWrite(ctx context.Context, rng *rand.Rand) {
	l := r.leader()
	f := r.c.Frontend(l)
	if l == 0 || f == nil {
		return
	}
	reader := r.other(rng, l)
	k := rng.IntN(keys)
	r.hist.fault("crash %d after a write of %s, %d reads at once", l, keyPath(k), reader)
	net := r.c.Network()
	net.CutOneWay(frontendtest.Addr(l), frontendtest.Addr(reader))
	if rng.IntN(2) == 0 {
		r.slowDisk(rng)
	}
	r.cl.put(ctx, f, 92, k, fmt.Sprintf("n%d", r.value.Add(1)))
	if err := r.c.Crash(l); err != nil {
		r.failf("crash frontend %d: %v", l, err)
		return
	}
	pause(ctx, time.Duration(rng.IntN(300))*time.Millisecond)
	r.restart(ctx, l, "after a power cut right after a write")
	net.Heal()
	for range 20 {
		g := r.c.Frontend(reader)
		if g == nil || ctx.Err() != nil || r.cl.read(ctx, g, 93, k) {
			return
		}
	}
}

// retryAcrossImage is a client that lost the acknowledgement of a keyed
// put and retries it through another frontend after the frontends
// checkpointed: the retry lands after an image its first copy is in,
// within the dedupe window unless the checkpoints took long while the
// clients wrote (each call is recorded apart, keyedPut), and the live
// appliers skip it. Then writes and checkpoints compact the logs up to
// that image, and the differential check replays from it on every
// frontend.
func (r *run) retryAcrossImage(ctx context.Context, rng *rand.Rand) {
	up := r.running()
	if len(up) < 2 {
		return
	}
	a, b := up[rng.IntN(len(up))], 0
	for b == 0 || b == a {
		b = up[rng.IntN(len(up))]
	}
	k := rng.IntN(keys)
	value := fmt.Sprintf("n%d", r.value.Add(1))
	r.hist.fault("keyed put of %s through %d, retried through %d across a checkpoint", keyPath(k), a, b)
	var key [16]byte
	for i := range key {
		key[i] = byte(rng.Uint32())
	}
	p := r.newKeyedPut(94, k, value, key)
	if f := r.c.Frontend(a); f != nil {
		_, _ = p.attempt(ctx, f)
	}
	r.checkpointAll(ctx)
	if f := r.c.Frontend(b); f != nil {
		_, _ = p.attempt(ctx, f)
	}
	p.finish()
	if l := r.leader(); l != 0 {
		r.fill(ctx, r.c.Frontend(l), fmt.Sprintf("retry-%d", r.value.Load()), 12+rng.IntN(30))
	}
	r.checkpointAll(ctx)
	for _, i := range r.running() {
		r.checkImagesNow(ctx, i)
	}
}

// checkpointAll checkpoints every running frontend (the leader's may be
// disabled; a lagging one may fail).
func (r *run) checkpointAll(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, i := range r.running() {
		if f := r.c.Frontend(i); f != nil {
			_, _ = f.Checkpointer().Checkpoint(cctx)
		}
	}
}

// fill writes n batches through f that leave the tree as it was (a node
// created and deleted), to move the log on.
func (r *run) fill(ctx context.Context, f *frontend.Frontend, prefix string, n int) {
	if f == nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for k := 0; k < n && wctx.Err() == nil; k++ {
		_, _ = f.Write(wctx, catalog.Batch{Ops: []catalog.Op{
			{Type: catalog.OpCreate, Path: fmt.Sprintf("/%s-%d", prefix, k), Kind: "filler"},
			{Type: catalog.OpDelete, Path: fmt.Sprintf("/%s-%d", prefix, k)},
		}})
	}
}

// restart starts frontend i again; a failure is a finding (a restart
// needs no quorum: the frontend finds its member record in its own log).
func (r *run) restart(ctx context.Context, i int, why string) {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := r.c.RestartFrontend(sctx, i); err != nil && ctx.Err() == nil {
		r.failf("restart frontend %d %s: %v", i, why, err)
	}
}

// lagBehindImage cuts a follower off, writes until the others' logs are
// compacted past it (a checkpoint on each), and heals: it must catch up
// by installing an image. Half the time a worker restarts twice before
// the checkpoint and once after it, and a query through the cut-off
// follower runs on the worker's newest process (workerBehindImage).
func (r *run) lagBehindImage(ctx context.Context, rng *rand.Rand) {
	l := r.leader()
	if l == 0 {
		return
	}
	lag := r.other(rng, l)
	r.hist.fault("lag %d behind an image", lag)
	r.c.Partition(lag, r.others(lag)...)
	defer r.c.Network().Heal()
	if rng.IntN(2) == 0 && r.mem != nil {
		r.mem.workerBehindImage(ctx, rng, l, lag)
		return
	}
	r.fill(ctx, r.c.Frontend(l), fmt.Sprintf("lag-%d", lag), 80)
	r.checkpointAll(ctx)
}

// workerBehindImage runs while frontend lag is cut off: a worker restarts
// twice, each process recorded, and the frontends checkpoint (lag's
// image, once installed, shows the worker two transitions on), the worker restarts once more, and a
// query on lag runs on that newest process, which lag's registry has not
// heard of (an ahead part). The image then shows lag's registry the
// worker at an epoch that started before the query's, skipping the
// transitions in between, before the log shows the query's: a part on a
// running process that such a skip must not cancel.
func (m *members) workerBehindImage(ctx context.Context, rng *rand.Rand, leader, lag int) {
	select {
	case m.op <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-m.op }()
	id := m.workers[rng.IntN(len(m.workers))]
	m.r.hist.fault("restart worker %d twice behind an image of %d, then once more", id, lag)
	for range 2 {
		m.restartWorker(ctx, id, 0)
		m.awaitRecorded(ctx, id)
	}
	// Writes past the transitions let the checkpoints compact them away.
	m.r.fill(ctx, m.r.c.Frontend(leader), fmt.Sprintf("lag-%d", lag), 80)
	m.r.checkpointAll(ctx)
	m.restartWorker(ctx, id, 0)
	m.awaitRecorded(ctx, id)
	rec := m.startQuery(ctx, lag, []uint64{id}, true)
	if rec == nil {
		m.r.hist.fault("no query through %d on worker %d's newest process: not published yet", lag, id)
		return
	}
	m.r.hist.fault("query through %d on worker %d's newest process %s", lag, id, short(rec.workers[0].epoch))
	hold := time.Duration(3000+rng.IntN(4000)) * time.Millisecond // rng is the nemesis goroutine's
	m.loops.Go(func() { m.hold(ctx, rec, hold) })
}

// awaitRecorded waits, up to 10 s, until a running frontend's member
// records show worker id's running process.
func (m *members) awaitRecorded(ctx context.Context, id uint64) {
	limit := time.Now().Add(10 * time.Second)
	for time.Now().Before(limit) {
		if w := m.r.c.Worker(id); w != nil && m.recorded(part{id, w.Epoch()}) {
			return
		}
		if !pause(ctx, 50*time.Millisecond) {
			return
		}
	}
}

// crashLoop cuts a frontend's power two to four times, each time while
// a linearizable read through it is in flight on slow links, restarts it
// after a short outage (a write of the same register acknowledged
// meanwhile through the leader) and reads it through the frontend at
// once: a young run's first read rounds meet the answers to the rounds
// of the run before, which the leader may still send after the restart.
func (r *run) crashLoop(ctx context.Context, rng *rand.Rand) {
	i := r.pick(rng)
	loops := 2 + rng.IntN(3)
	r.hist.fault("crash loop %d x%d", i, loops)
	net := r.c.Network()
	for _, o := range r.others(i) {
		slow := frontendtest.Faults{Delay: time.Duration(10+rng.IntN(60)) * time.Millisecond}
		net.SetFaults(frontendtest.Addr(o), frontendtest.Addr(i), slow)
		for _, p := range r.others(i) {
			if p != o {
				net.SetFaults(frontendtest.Addr(o), frontendtest.Addr(p), slow)
			}
		}
	}
	defer net.ClearFaults()
	for range loops {
		f := r.c.Frontend(i)
		if f == nil {
			return
		}
		var inflight sync.WaitGroup
		k := rng.IntN(keys)
		inflight.Go(func() { r.cl.read(ctx, f, 90, k) })
		pause(ctx, time.Duration(rng.IntN(60))*time.Millisecond)
		if err := r.c.Crash(i); err != nil {
			r.failf("crash frontend %d: %v", i, err)
			return
		}
		inflight.Wait()
		// A write of the register acknowledged while i is down: the read
		// through i after its restart must see it.
		if l := r.leader(); l != 0 && l != i {
			if g := r.c.Frontend(l); g != nil {
				r.cl.put(ctx, g, 95, k, fmt.Sprintf("n%d", r.value.Add(1)))
			}
		}
		pause(ctx, time.Duration(rng.IntN(30))*time.Millisecond)
		r.restart(ctx, i, "in a crash loop")
		if f := r.c.Frontend(i); f != nil {
			r.cl.read(ctx, f, 91, k)
		}
	}
}
