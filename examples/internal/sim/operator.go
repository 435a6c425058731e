package sim

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/metatree/metatree/journal"
)

// promote is an operator's promotion of an observer to a voter in the
// middle of the faults, through a random running frontend (a follower
// forwards it to the leader): in a run of a sole voter and observers,
// the first running observer that the frontend's membership still holds
// as an observer. Promotion refuses an observer too far behind
// (journal.PromoteMaxLag) or a cluster without a leader; the fault then
// tries again when it comes up again. From the first try on, the sole
// voter's disk is fast and stays fast: with two voters, its WAL sees the
// appends a follower receives, under the store's lock (see slowDisk).
func (r *run) promote(ctx context.Context, rng *rand.Rand) {
	up := r.running()
	if r.voters != 1 || len(up) == 0 {
		return
	}
	through := up[rng.IntN(len(up))]
	f := r.c.Frontend(through)
	if f == nil {
		return
	}
	obs := 0
	for _, m := range f.Journal().Status().Members {
		if m.Role == journal.Observer && r.c.Frontend(int(m.ID)) != nil && (obs == 0 || int(m.ID) < obs) {
			obs = int(m.ID)
		}
	}
	if obs == 0 {
		return
	}
	r.promoted.Store(true)
	r.fastDisk1()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := f.Journal().Promote(pctx, uint64(obs))
	r.hist.fault("promote observer %d through %d: %v", obs, through, err)
}

// fastDisk1 ends frontend 1's slow disk, if it is slow: a promotion or a
// join gives the sole voter's cluster another voter, and the nemesis slows
// only a sole voter's disk (nemesis.go).
func (r *run) fastDisk1() {
	if !r.diskSlow.Load() {
		return
	}
	r.hist.fault("disk of 1 fast")
	if fs := r.c.FS(1); fs != nil {
		fs.SetSyncDelay(0, "")
	}
	r.diskSlow.Store(false)
}
