package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/journal"
)

// The kinds of an operator's recovery from a disaster (Result.Disaster).
const (
	disasterForce   = "force-new-cluster"
	disasterRestore = "restore"
)

// disasterIDs is the first id of the frontends a recovery adds: past the
// run's frontends, workers and joins.
const disasterIDs = 30

// disaster is the run's operator recovery, drawn from the seed: one run in
// six loses the majority of its voters for good and forces a new cluster
// from the most up-to-date survivor (a run of three or more voters; in
// other runs this draw restores a backup instead), one in six restores a
// backup into a new cluster, the others have none. It comes once, in the
// middle of the faults (between four and seven tenths of the run's duration), at
// the first fault after its time that finds a leader on a healed cluster.
type disaster struct {
	kind string
	at   time.Time
	done bool
	rng  *rand.Rand
	next int    // the id the next frontend it adds takes
	fs   vfs.FS // the operator's disk, where a backup is written
}

func drawDisaster(seed uint64, voters int, start time.Time, d time.Duration) *disaster {
	rng := rand.New(rand.NewPCG(seed, 0xd15a))
	ds := &disaster{rng: rng, next: disasterIDs, fs: vfs.NewMem()}
	switch rng.IntN(6) {
	case 0:
		ds.kind = disasterForce
		if voters < 3 {
			ds.kind = disasterRestore
		}
	case 1:
		ds.kind = disasterRestore
	}
	ds.at = start.Add(d*4/10 + time.Duration(rng.Int64N(int64(d*3/10)+1)))
	return ds
}

// due reports whether the recovery is to run now.
func (ds *disaster) due() bool {
	return ds != nil && ds.kind != "" && !ds.done && !time.Now().Before(ds.at)
}

// recoverFromDisaster runs the run's recovery, if it is due, in place of
// a fault, and reports whether it ran one. A recovery that finds no leader
// on the healed cluster waits for the next fault.
func (r *run) recoverFromDisaster(ctx context.Context) bool {
	ds := r.dis
	if !ds.due() {
		return false
	}
	r.promoted.Store(true) // no slow disk from here on (see slowDisk)
	r.fastDisk1()
	switch ds.kind {
	case disasterForce:
		ds.done = r.forceNewCluster(ctx, ds.rng)
	case disasterRestore:
		ds.done = r.restoreBackup(ctx, ds.rng)
	}
	return true
}

// settle heals every link, starts every stopped member frontend and
// returns the agreed leader, or 0 when none comes within 20 s.
func (r *run) settle(ctx context.Context) int {
	r.c.Network().Heal()
	r.c.Network().ClearFaults()
	for _, i := range r.ids() {
		if r.c.Frontend(i) == nil {
			r.restart(ctx, i, "before an operator's recovery")
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	l, err := r.c.Leader(lctx)
	if err != nil {
		r.hist.fault("no leader for the operator's recovery: it waits: %v", err)
		return 0
	}
	return l
}

// forceNewCluster loses the majority of the voters for good (a power cut;
// never restarted on their disks) and every observer with them, and
// recovers as an operator does: the most up-to-date surviving voter (the
// highest commit index) restarts with -force-new-cluster
// (frontendtest.Cluster.ForceNewCluster), the other survivors are shut
// down, and new frontends (new ids, empty data dirs) join it back to the
// run's shape. Half the time the leader survives, cut off from the others
// while it proposes its own removal first, so that the survivor's log
// ends in a removal of itself that never committed (the force must not
// apply it). Before the loss every survivor applies all that is committed
// (a read barrier): what was acknowledged before that must survive.
func (r *run) forceNewCluster(ctx context.Context, rng *rand.Rand) bool {
	l := r.settle(ctx)
	if l == 0 {
		return false
	}
	roles := r.raftRoles()
	var voters []int
	for _, i := range r.ids() {
		if roles[i] == journal.Follower {
			voters = append(voters, i)
		}
	}
	if len(voters) < 3 {
		r.hist.fault("quorum loss: %d voters, too few: it waits", len(voters))
		return false
	}
	rng.Shuffle(len(voters), func(a, b int) { voters[a], voters[b] = voters[b], voters[a] })
	selfRemoval := rng.IntN(2) == 0
	if selfRemoval {
		k := slices.Index(voters, l)
		voters[k], voters[len(voters)-1] = voters[len(voters)-1], voters[k]
	}
	lost, survivors := voters[:len(voters)/2+1], voters[len(voters)/2+1:]
	var gone []int // every member but the survivors
	for _, i := range r.ids() {
		if !slices.Contains(survivors, i) {
			gone = append(gone, i)
		}
	}
	keep, nb := r.hist.call(), r.cl.ackedCount()
	for _, s := range survivors {
		if !r.barrier(ctx, s) {
			keep = 0
		}
	}
	if selfRemoval {
		r.c.Partition(l, r.others(l)...)
		if lf := r.c.Frontend(l); lf != nil {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			err := lf.Journal().RemoveMember(rctx, uint64(l), true)
			cancel()
			r.hist.fault("leader %d, cut off, proposes its own removal: %v", l, err)
		}
	}
	epochs := r.epochs(r.ids())
	for _, i := range gone {
		if err := r.c.Crash(i); err != nil {
			r.failf("crash frontend %d: %v", i, err)
		}
	}
	r.hist.fault("quorum loss: %v lost for good (voters %v), survivors %v", gone, lost, survivors)
	// The operator picks the most up-to-date survivor.
	chosen, b := 0, uint64(0)
	for _, s := range survivors {
		if f := r.c.Frontend(s); f != nil {
			if st := f.Journal().Status(); chosen == 0 || st.Committed > b || (st.Committed == b && s == l) {
				chosen, b = s, st.Committed
			}
		}
	}
	for _, s := range survivors {
		r.c.StopFrontend(s)
	}
	stopped := time.Now()
	r.c.Network().Heal()
	if chosen == 0 {
		r.failf("quorum loss: no survivor of %v runs", survivors)
		return true
	}
	r.ws.cutAt(b)
	r.own.cut(b)
	start, startTime := r.hist.call(), time.Now()
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err := r.c.ForceNewCluster(fctx, chosen)
	cancel()
	r.hist.fault("force a new cluster from %d (commit %d): %v", chosen, b, err)
	old := slices.DeleteFunc(r.ids(), func(i int) bool { return i == chosen })
	r.lose(old, epochs, startTime, true)
	r.oldClusterStopped(stopped)
	if err != nil {
		r.failf("force a new cluster from frontend %d after a quorum loss: %v", chosen, err)
		return true
	}
	r.cutHere(ctx, chosen, keep, start, nb, b)
	r.probeOld(ctx, rng, lost[0], chosen)
	r.refill(ctx, chosen)
	r.checkNoOldMember(ctx, old)
	r.checkImagesNow(ctx, chosen)
	return true
}

// restoreBackup backs up a running member (a follower when there is one,
// which spares the leader) as `metactl backup` does, after a read barrier
// and a checkpoint on it (what was acknowledged before them is in the
// backup); lets the cluster run on for up to 3 s (what it acknowledges
// then is lost by design); shuts every frontend down for good; restores
// the backup into a new cluster of one new frontend (as `metactl restore`
// and a metaserver started on its dir do) and adds new frontends back to
// the run's shape.
func (r *run) restoreBackup(ctx context.Context, rng *rand.Rand) bool {
	l := r.settle(ctx)
	if l == 0 {
		return false
	}
	from := l
	if o := r.others(l); len(o) > 0 {
		from = o[rng.IntN(len(o))]
	}
	f := r.c.Frontend(from)
	if f == nil {
		return false
	}
	keep, nb := r.hist.call(), r.cl.ackedCount()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	checkpointed := uint64(0)
	if r.barrier(ctx, from) {
		if info, err := f.Checkpointer().Checkpoint(cctx); err == nil {
			checkpointed = info.Index
		}
	}
	cancel()
	if checkpointed == 0 {
		keep = 0
	}
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	info, err := r.c.Backup(bctx, from, r.dis.fs, "/backup.image")
	cancel()
	r.hist.fault("back up %d (checkpoint at %d): image %d: %v", from, checkpointed, info.Index, err)
	if err != nil {
		return true // no backup, no restore
	}
	if info.Index < checkpointed {
		r.failf("the backup of frontend %d holds image %d, older than its checkpoint at %d", from, info.Index, checkpointed)
	}
	pause(ctx, time.Duration(500+rng.IntN(2500))*time.Millisecond)
	old := r.ids()
	epochs := r.epochs(old)
	for _, i := range old {
		r.c.StopFrontend(i)
	}
	r.c.Network().Heal()
	r.c.Network().ClearFaults()
	id := r.dis.next
	r.dis.next++
	start, startTime := r.hist.call(), time.Now()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err = r.c.Restore(rctx, id, r.dis.fs, "/backup.image")
	cancel()
	r.hist.fault("restore the backup at %d as frontend %d: %v", info.Index, id, err)
	if err != nil {
		r.failf("restore the backup of frontend %d at %d as frontend %d: %v", from, info.Index, id, err)
		for _, i := range old {
			r.restart(ctx, i, "after a failed restore")
		}
		return true
	}
	r.ws.cutAt(info.Index)
	r.own.cut(info.Index)
	r.lose(old, epochs, startTime, false)
	r.joined(id)
	r.cutHere(ctx, id, keep, start, nb, info.Index)
	r.probeOld(ctx, rng, old[rng.IntN(len(old))], id)
	r.refill(ctx, id)
	r.checkNoOldMember(ctx, old)
	r.checkImagesNow(ctx, id)
	return true
}

// barrier makes frontend i apply everything committed (a read barrier),
// and reports whether it did within 10 s.
func (r *run) barrier(ctx context.Context, i int) bool {
	f := r.c.Frontend(i)
	if f == nil {
		return false
	}
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return f.Journal().ReadBarrier(bctx) == nil
}

// epochs returns the epoch of each of the frontends that runs.
func (r *run) epochs(ids []int) map[int]epoch.Epoch {
	out := map[int]epoch.Epoch{}
	for _, i := range ids {
		if f := r.c.Frontend(i); f != nil {
			out[i] = f.Epoch()
		}
	}
	return out
}

// lose takes the old cluster's frontends out of the run for good: they
// leave the fleet as removed members (the forced log removes them; a
// restored catalog's records of them are pruned), removed from start on.
func (r *run) lose(ids []int, epochs map[int]epoch.Epoch, start time.Time, forced bool) {
	for _, i := range ids {
		r.askRemoval(uint64(i))
		r.removed(removal{node: uint64(i), epoch: epochs[i], start: start, done: time.Now(), forced: forced})
	}
}

// cutHere reads the new cluster's first state through frontend i (a read
// barrier, then its registers), records the cut in the history, and
// drops what the old cluster acknowledged after keep that the new one
// lacks: unique creates acknowledged after the first nb, owned nodes
// created after index (the log the new cluster shares with the old).
func (r *run) cutHere(ctx context.Context, i int, keep, start int64, nb int, index uint64) {
	f := r.c.Frontend(i)
	if f == nil {
		r.failf("frontend %d, which started the new cluster, stopped before its first read", i)
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := r.c.Leader(lctx)
	if err == nil {
		err = f.Journal().ReadBarrier(lctx)
	}
	cancel()
	if err != nil {
		r.failf("the new cluster of frontend %d gives no linearizable read within 30 s: %v", i, err)
	}
	state := map[string]string{}
	for k := range keys {
		if n, ok := f.Tree().Get(keyPath(k)); ok {
			state[keyPath(k)] = n.Attrs["v"].Str()
		} else {
			r.failf("register %s missing on the new cluster of frontend %d", keyPath(k), i)
		}
	}
	end := r.hist.call()
	r.hist.addCut(cut{keep: keep, start: start, end: end, state: state})
	r.hist.fault("cut: state %v", state)
	r.cl.dropLost(nb, f.Tree())
	r.own.dropLost(index, f.Tree())
}

// ackedCount is the number of unique creates acknowledged so far.
func (cl *clients) ackedCount() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return len(cl.acked)
}

// dropLost forgets the creates acknowledged after the first nb that t
// lacks: a cut loses them by design.
func (cl *clients) dropLost(nb int, t *catalog.Tree) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	kept := cl.acked[:nb:nb]
	for _, p := range cl.acked[nb:] {
		if _, ok := t.Get(p); ok {
			kept = append(kept, p)
		}
	}
	cl.acked = kept
}

// dropLost forgets the owned nodes created after index that t lacks.
func (o *owned) dropLost(index uint64, t *catalog.Tree) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.nodes = slices.DeleteFunc(o.nodes, func(n ownedNode) bool {
		_, ok := t.Get(n.path)
		return n.index > index && !ok
	})
}

// probeOld brings one old frontend back as an operator's mistake might:
// half the time it restarts on the disk it was lost with, and a client
// writes and reads through it for up to 2 s (recorded: it must
// acknowledge nothing the new cluster lacks), then stops; else its id
// tries to join the new cluster on an empty data dir, which must be
// refused. An old frontend of another cluster than the new one's (a
// restore makes a new cluster) is that other cluster, which its disk
// alone may hold a quorum of (a sole voter's): what it acknowledges is
// that cluster's, never the new one's (otherCluster).
func (r *run) probeOld(ctx context.Context, rng *rand.Rand, i, now int) {
	if rng.IntN(2) == 0 {
		r.rejoin(ctx, rng, i)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	f, err := r.c.RestartFrontend(sctx, i)
	cancel()
	r.hist.fault("old frontend %d restarts on its disk: %v", i, err)
	if err != nil {
		return
	}
	if g := r.c.Frontend(now); g != nil && g.Journal().Status().ClusterID != f.Journal().Status().ClusterID {
		r.otherCluster(ctx, f, g)
	} else {
		acked, refused := r.throughRemoved(ctx, rng, f, time.Duration(rng.IntN(2000))*time.Millisecond)
		r.hist.fault("old frontend %d: %d operations completed, %d refused or failed", i, acked, refused)
	}
	r.c.StopFrontend(i)
	r.oldClusterStopped(time.Now())
}

// otherCluster writes a value of its own to every register through old,
// a frontend of another cluster than now's (unrecorded: the history is
// now's cluster's), then reads each register linearizably through now:
// none may hold a value written through old.
func (r *run) otherCluster(ctx context.Context, old, now *frontend.Frontend) {
	acked, value := 0, fmt.Sprintf("old-%d", old.ID())
	for k := range keys {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := old.Write(wctx, catalog.Batch{Ops: []catalog.Op{
			{Type: catalog.OpUpdate, Path: keyPath(k), Set: map[string]catalog.Value{"v": catalog.String(value)}},
		}})
		cancel()
		if err == nil {
			acked++
		}
	}
	r.hist.fault("old frontend %d, of another cluster: %d of %d writes acknowledged there", old.ID(), acked, keys)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := now.Journal().ReadBarrier(bctx); err != nil {
		return // the checks at the end read the registers again
	}
	for k := range keys {
		if n, ok := now.Tree().Get(keyPath(k)); ok {
			if v, _ := n.Attrs["v"].AsString(); v == value {
				r.failf("register %s of the new cluster holds %q, written through frontend %d of another cluster", keyPath(k), v, old.ID())
			}
		}
	}
}

// refill adds new frontends through frontend i, with new ids and empty
// data dirs, until the run has its shape again: its voters, then its
// observers. A join the new cluster refuses fails the run.
func (r *run) refill(ctx context.Context, i int) {
	for n := 1; n < r.n; n++ {
		role := journal.Follower
		if n >= r.voters {
			role = journal.Observer
		}
		id := r.dis.next
		r.dis.next++
		jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := r.c.JoinFrontend(jctx, id, role, i)
		cancel()
		r.hist.fault("new frontend %d joins as %s through %d: %v", id, role, i, err)
		if err != nil {
			r.failf("new frontend %d could not join the new cluster through %d: %v", id, i, err)
			if err := r.removeRetry(ctx, id); err != nil {
				r.hist.fault("undo the join of %d: %v", id, err)
			}
			continue
		}
		r.joined(id)
	}
}

// checkNoOldMember requires the new cluster's membership, as its leader
// applied it, to hold none of the old cluster's frontends but the one it
// started from.
func (r *run) checkNoOldMember(ctx context.Context, old []int) {
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	l, err := r.c.Leader(lctx)
	if err != nil {
		return
	}
	lf := r.c.Frontend(l)
	if lf == nil || lf.Journal().ReadBarrier(lctx) != nil {
		return
	}
	for _, m := range lf.Journal().Status().Members {
		if slices.Contains(old, int(m.ID)) {
			r.failf("frontend %d, lost to the old cluster, is a %s of the new cluster (leader %d)", m.ID, m.Role, l)
		}
	}
}
