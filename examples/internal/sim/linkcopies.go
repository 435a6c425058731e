package sim

import (
	"math/rand/v2"
	"time"

	"github.com/metatree/metatree/examples/frontend/frontendtest"
)

// maxWorkers bounds the workers a run has (startMembers: one to three),
// whose ids follow the frontends'.
const maxWorkers = 3

// duplicateLinks makes one to three links deliver requests twice, the
// copy late (frontendtest.Faults.Duplicate): from a frontend to another
// (raft streams, proposals forwarded in them, membership changes, image
// fetches) or to a running worker (the leader's heartbeats, lists of
// frontends a copy brings back after newer ones). Only connections
// dialed from now on are copied, so the link also resets now and then
// (raft streams are dialed again). A later heal clears it.
func (r *run) duplicateLinks(rng *rand.Rand) {
	net := r.c.Network()
	for range 1 + rng.IntN(3) {
		a := r.pick(rng)
		to := frontendtest.Addr(r.other(rng, a))
		if w := r.runningWorkers(); len(w) > 0 && rng.IntN(3) == 0 {
			to = frontendtest.WorkerAddr(w[rng.IntN(len(w))])
		}
		f := frontendtest.Faults{
			Duplicate: float64(1+rng.IntN(20)) / 100,
			Lag:       time.Duration(1+rng.IntN(3000)) * time.Millisecond,
			Jitter:    time.Duration(rng.IntN(20)) * time.Millisecond,
			Reset:     float64(rng.IntN(2)) / 100,
		}
		r.hist.fault("duplicate %s->%s %+v", frontendtest.Addr(a), to, f)
		net.SetFaults(frontendtest.Addr(a), to, f)
	}
}

// runningWorkers returns the ids of the workers running now.
func (r *run) runningWorkers() []uint64 {
	var out []uint64
	for id := uint64(r.n + 1); id <= uint64(r.n+maxWorkers); id++ {
		if r.c.Worker(id) != nil {
			out = append(out, id)
		}
	}
	return out
}
