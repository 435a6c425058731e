package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
)

// ownedDir holds the workers' task nodes, each owned by its worker's
// epoch; fencedDir the nodes of fenced writes.
const (
	ownedDir  = "/tasks"
	fencedDir = "/fenced"
)

// ownedNode is a task node a frontend acknowledged, created with an owner.
type ownedNode struct {
	path   string
	worker uint64
	owner  catalog.Owner
	index  uint64 // the create's
}

// owned is the run's owned-node workload: task nodes created through
// random frontends, each owned by a worker's current epoch (some marked
// to be orphaned rather than deleted when it ends), and writes fenced by
// a worker's epoch, some held until after the epoch ended. A checker
// reads every frontend's catalog all along.
type owned struct {
	r    *run
	m    *members
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	nodes  []ownedNode
	fences map[uint64]keptFence // per worker, a fence taken earlier
	stale  int                  // fenced writes sent after their epoch ended
	era    int                  // the operators' recoveries so far (cut)
}

// cut is an operator's recovery (disaster.go) whose new cluster agrees
// with the old one's log up to index and goes on from there with records
// of its own. It forgets the fences kept on the old cluster, whose record
// versions and generations cannot be compared with the new one's (a
// worker's epoch can be current at a later generation on the new cluster
// than on the old one); a fence kept in an iteration that began
// before the cut is not kept. It forgets the owned nodes created after
// index too: their creates are lost by design, and their owners' versions
// are indexes of the old cluster.
func (o *owned) cut(index uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.era++
	clear(o.fences)
	o.nodes = slices.DeleteFunc(o.nodes, func(n ownedNode) bool { return n.index > index })
}

// keep keeps worker id's fence k, unless a cut came after k's era began.
func (o *owned) keep(id uint64, k keptFence) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if k.era == o.era {
		o.fences[id] = k
	}
}

// kept returns worker id's kept fence for an iteration that began in era,
// if no cut has come since.
func (o *owned) kept(id uint64, era int) (keptFence, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k, ok := o.fences[id]
	return k, ok && k.era == era && o.era == era
}

func (r *run) startOwned(ctx context.Context, m *members) (*owned, error) {
	l, err := r.c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	f := r.c.Frontend(l)
	if f == nil {
		return nil, errors.New("the leader stopped")
	}
	if _, err := f.Write(ctx, catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: ownedDir, Kind: "dir"},
		{Type: catalog.OpCreate, Path: fencedDir, Kind: "dir"},
	}}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	o := &owned{r: r, m: m, stop: cancel, fences: map[uint64]keptFence{}}
	rng := rand.New(rand.NewPCG(r.opts.Seed, 0x0f0e))
	o.wg.Go(func() { o.loop(ctx, rng) })
	o.wg.Go(func() {
		for pause(ctx, 700*time.Millisecond) {
			o.checkAll()
		}
	})
	return o, nil
}

// end stops the workload and the checker.
func (o *owned) end() {
	o.stop()
	o.wg.Wait()
}

func (o *owned) loop(ctx context.Context, rng *rand.Rand) {
	for seq := 0; pause(ctx, time.Duration(100+rng.IntN(1200))*time.Millisecond); seq++ {
		o.mu.Lock()
		era := o.era // before the frontend is chosen: see cut
		o.mu.Unlock()
		up := o.r.running()
		if len(up) == 0 {
			continue
		}
		i := up[rng.IntN(len(up))]
		f := o.r.c.Frontend(i)
		id := o.m.workers[rng.IntN(len(o.m.workers))]
		w := o.r.c.Worker(id)
		if f == nil || w == nil {
			continue
		}
		switch p := rng.IntN(100); {
		case p < 55: // a task node owned by the worker's epoch
			check, owner := heartbeat.OwnerOf(id, w.Epoch(), rng.IntN(3) == 0)
			path := fmt.Sprintf("%s/t%d-%d", ownedDir, id, seq)
			res, err := f.Write(ctx, catalog.Batch{Ops: []catalog.Op{check, {Type: catalog.OpCreate, Path: path, Kind: "task", Owner: owner}}})
			if err != nil {
				continue // not published yet, or ended: a worker would retry
			}
			// The version that owns it is the record's when the batch
			// applied; a node already gone (its epoch ended since) is not
			// followed.
			if owner, ok := f.Tree().Owned(path); ok {
				o.mu.Lock()
				o.nodes = append(o.nodes, ownedNode{path: path, worker: id, owner: owner, index: res.Index})
				o.mu.Unlock()
			}
		case p < 80: // a write fenced by the worker's epoch; the fence kept
			fence := heartbeat.Fence(id, w.Epoch())
			// Kept only where this catalog shows the epoch: the version it
			// shows it at is what a later record must pass to end it.
			if rec, ok := f.Tree().Get(heartbeat.MemberPath(id)); ok && rec.Attrs["epoch"].Equal(catalog.String(w.Epoch().String())) {
				o.keep(id, keptFence{op: fence, at: rec.Modified, gen: rec.Attrs["generation"].Int64(), era: era})
			}
			_, _ = f.Write(ctx, catalog.Batch{Ops: []catalog.Op{fence, {Type: catalog.OpCreate, Path: fmt.Sprintf("%s/f%d-%d", fencedDir, id, seq), Kind: "fenced"}}})
		default: // a fence kept from before, if this catalog shows its epoch ended
			kept, ok := o.kept(id, era)
			fence := kept.op
			rec, has := f.Tree().Get(heartbeat.MemberPath(id))
			if !ok || !has || !kept.ended(rec) {
				continue // the fence's epoch is current here, or not reached yet
			}
			o.mu.Lock()
			o.stale++
			o.mu.Unlock()
			path := fmt.Sprintf("%s/s%d-%d", fencedDir, id, seq)
			res, err := f.Write(ctx, catalog.Batch{Ops: []catalog.Op{fence, {Type: catalog.OpCreate, Path: path, Kind: "fenced"}}})
			if err == nil {
				o.r.failf("a write fenced by worker %d's epoch %v applied at %d through frontend %d, whose catalog had already ended it (record at version %d: %v)", id, fence.Cond.Match, res.Index, i, rec.Modified, rec.Attrs)
			}
		}
	}
}

// checkAll checks every running frontend's catalog.
func (o *owned) checkAll() {
	for _, i := range o.r.running() {
		if f := o.r.c.Frontend(i); f != nil {
			o.check(i, f.Tree())
		}
	}
}

// check reads the owned nodes and their owners' records on frontend i's
// catalog at one index (retrying while it applies), and requires: an
// owned node whose owner's version has ended there is gone or marked
// orphaned; one whose owner's version is current is there.
func (o *owned) check(i int, t *catalog.Tree) {
	o.mu.Lock()
	nodes := append([]ownedNode(nil), o.nodes...)
	o.mu.Unlock()
	type state struct {
		node   catalog.Node
		exists bool
		rec    catalog.Node
		hasRec bool
	}
	var states []state
	var at uint64
	for range 10 {
		at = t.Index()
		states = states[:0]
		for _, n := range nodes {
			var s state
			s.node, s.exists = t.Get(n.path)
			s.rec, s.hasRec = t.Get(heartbeat.MemberPath(n.worker))
			states = append(states, s)
		}
		if t.Index() == at {
			break
		}
		states = nil
	}
	if states == nil {
		return // the catalog applied all along; the next round reads it
	}
	for k, n := range nodes {
		s := states[k]
		if n.index > at {
			continue // not applied here yet
		}
		current := s.hasRec && s.rec.Modified == n.owner.Version
		switch {
		case current && !s.exists:
			o.r.failf("frontend %d at index %d: owned node %s (created at %d) is gone while worker %d's record is still at its owner version %d", i, at, n.path, n.index, n.worker, n.owner.Version)
		case !current && s.exists && !orphaned(s.node):
			o.r.failf("frontend %d at index %d: owned node %s (created at %d, owner version %d) outlives its epoch: worker %d's record is at %d", i, at, n.path, n.index, n.owner.Version, n.worker, s.rec.Modified)
		case !current && s.exists && !n.owner.Orphan:
			o.r.failf("frontend %d at index %d: owned node %s was marked orphaned, but its create asked for it to go", i, at, n.path)
		}
	}
}

// keptFence is a fence on a worker's epoch, and the version and the
// generation of the worker's record at which a frontend's catalog showed
// that epoch, in one cluster's era.
type keptFence struct {
	op  catalog.Op
	at  uint64
	gen int64
	era int // the recoveries before it was kept (owned.cut)
}

// ended reports whether member record rec shows that the fence's epoch
// ended: a later version of the record names another epoch (a restart),
// shows the member dead, or, alive with the same epoch, has a later
// generation. Every transition bumps the generation and only a death
// keeps the epoch, so that record went through a death, which ended the
// epoch as surely as a restart: a member declared dead comes back with a
// fresh epoch, never with the ended one. An ended epoch never becomes
// current again, so a write with the fence must be refused at every
// later index; a catalog that shows an older version proves nothing.
func (k keptFence) ended(rec catalog.Node) bool {
	want, ok := k.op.Cond.Match["epoch"]
	if !ok || rec.Modified <= k.at {
		return false
	}
	got, ok := rec.Attrs["epoch"]
	if !ok {
		return false
	}
	return !got.Equal(want) || rec.Attrs["status"].Str() != heartbeat.StatusAlive.String() || rec.Attrs["generation"].Int64() > k.gen
}

// orphaned reports whether n carries the mark of an ended owner.
func orphaned(n catalog.Node) bool {
	_, ok := n.Attrs[catalog.OrphanedAttr]
	return ok
}
