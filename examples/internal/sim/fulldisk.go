package sim

import (
	"context"
	"math/rand/v2"
	"time"
)

// diskFree is the free space every frontend's disk reports while it is
// not full (frontendtest.Options.DiskFree): far above the journal's
// reserve, so that its free-space guard runs and finds room.
const diskFree = 1 << 30

// fullDisk fills one frontend's disk for a while: its free space falls
// under the journal's reserve (the guard refuses writes, and the
// member's no-space alarm, once it commits, makes every member refuse
// them with journal.ErrNoSpace, a definite error), and one time in three
// the disk is full outright: every write that needs space fails with
// ENOSPC (a WAL append halts the journal). Then the space comes back: the
// alarm clears at the guard's next check, and a halted frontend is
// restarted, as its operator would. A refused write must leave nothing
// applied, and the cluster must take writes again within the recovery
// bound: the linearizability, digest and differential checks, and the
// recovery check, see to it.
//
// It waits for the alarm to clear before it returns, and it does not
// fill a disk while the sole voter's is slow: the alarm is a membership
// change, whose save waits on the store's lock, which a slow WAL fsync
// holds, and a goroutine waiting on a lock stops the bubble's clock for
// good (see slowDisk).
func (r *run) fullDisk(ctx context.Context, rng *rand.Rand) {
	if r.diskSlow.Load() {
		return
	}
	i := r.pick(rng)
	fs := r.c.FS(i)
	if fs == nil {
		return
	}
	hard := rng.IntN(3) == 0
	d := time.Duration(500+rng.IntN(8000)) * time.Millisecond
	free := int64(rng.IntN(32 << 20))
	r.hist.fault("disk of %d full for %v (free %d bytes, ENOSPC %v)", i, d, free, hard)
	r.diskLow.Store(true)
	fs.SetFree(free)
	fs.SetFull(hard)
	pause(ctx, d)
	if fs = r.c.FS(i); fs != nil {
		fs.SetFull(false)
		fs.SetFree(diskFree)
	}
	r.diskLow.Store(false)
	if f := r.c.Frontend(i); f != nil && f.Journal().Status().Err != nil {
		r.hist.fault("restart %d, halted by its full disk: %v", i, f.Journal().Status().Err)
		r.restart(ctx, i, "after its disk filled")
	}
	for range 100 {
		if l := r.leader(); l != 0 && !r.noSpace(l) {
			return
		}
		if !pause(ctx, 200*time.Millisecond) {
			return
		}
	}
}

// noSpace reports whether the cluster refuses writes for want of space:
// a frontend's disk is under the reserve, or the membership frontend
// leader has applied holds a no-space alarm.
func (r *run) noSpace(leader int) bool {
	if r.diskLow.Load() {
		return true
	}
	f := r.c.Frontend(leader)
	if f == nil {
		return false
	}
	for _, m := range f.Journal().Status().Members {
		if m.NoSpace {
			return true
		}
	}
	return false
}
