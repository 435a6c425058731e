package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/internal/linearize"
)

// clients are the workload: goroutines that each pick, with their own
// random source, a running frontend (leader, follower alike) and an
// operation, until stopped.
type clients struct {
	r      *run
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// acked are the unique creates a frontend acknowledged (they must be
	// present at the end); local holds, per tree, the index its last
	// local read saw (a tree never goes back).
	acked []string
	local map[*catalog.Tree]uint64
}

func startClients(ctx context.Context, r *run, n int, seed uint64) *clients {
	ctx, cancel := context.WithCancel(ctx)
	cl := &clients{r: r, cancel: cancel, local: map[*catalog.Tree]uint64{}}
	for id := range n {
		rng := rand.New(rand.NewPCG(seed, uint64(id)))
		cl.wg.Go(func() { cl.loop(ctx, id, rng) })
	}
	return cl
}

// stop ends the clients and waits for them.
func (cl *clients) stop() {
	cl.cancel()
	cl.wg.Wait()
}

// think is a client's pause between two operations, in virtual time.
func think(ctx context.Context, rng *rand.Rand) bool {
	return pause(ctx, time.Duration(10+rng.IntN(200))*time.Millisecond)
}

func (cl *clients) loop(ctx context.Context, id int, rng *rand.Rand) {
	for seq := 0; think(ctx, rng); seq++ {
		up := cl.r.running()
		if len(up) == 0 {
			continue
		}
		f := cl.r.c.Frontend(up[rng.IntN(len(up))])
		if f == nil {
			continue
		}
		value := fmt.Sprintf("c%d-%d", id, seq)
		switch p := rng.IntN(100); {
		case p < 35:
			cl.put(ctx, f, id, rng.IntN(keys), value)
		case p < 50:
			cl.cas(ctx, f, id, rng.IntN(keys), value)
		case p < 70:
			cl.read(ctx, f, id, rng.IntN(keys))
		case p < 80:
			cl.readLocal(f)
		default:
			cl.create(ctx, rng, id, value)
		}
	}
}

func (cl *clients) put(ctx context.Context, f *frontend.Frontend, id, k int, value string) {
	in := linearize.KV{Put: true, Key: keyPath(k), Value: value}
	call := cl.r.hist.call()
	res, err := f.Write(ctx, catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpUpdate, Path: keyPath(k), Set: map[string]catalog.Value{"v": catalog.String(value)}},
	}})
	// A result means the batch applied (err is then its own failure, which
	// an update of an existing register never has); without one the
	// outcome is unknown.
	if res != nil && err != nil {
		cl.r.failf("put %s=%s through frontend %d failed as a batch: %v", keyPath(k), value, f.ID(), err)
	}
	cl.r.hist.done(id, call, in, nil, res != nil)
}

// cas sets the register over the value the frontend's tree shows now
// (fresh or stale: a stale one fails the precondition).
func (cl *clients) cas(ctx context.Context, f *frontend.Frontend, id, k int, value string) {
	expect := ""
	if n, ok := f.Tree().Get(keyPath(k)); ok {
		expect = n.Attrs["v"].Str()
	}
	in := linearize.KV{CAS: true, Key: keyPath(k), Expect: expect, Value: value}
	call := cl.r.hist.call()
	res, err := f.Write(ctx, catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpUpdate, Path: keyPath(k), Set: map[string]catalog.Value{"v": catalog.String(value)},
			Cond: catalog.Cond{Match: map[string]catalog.Value{"v": catalog.String(expect)}}},
	}})
	switch {
	case res == nil:
		cl.r.hist.done(id, call, in, nil, false)
	case err == nil:
		cl.r.hist.done(id, call, in, true, true)
	case errors.Is(err, catalog.ErrConflict):
		cl.r.hist.done(id, call, in, false, true)
	default:
		cl.r.failf("cas %s through frontend %d failed as a batch: %v", keyPath(k), f.ID(), err)
		cl.r.hist.done(id, call, in, nil, false)
	}
}

// read is a linearizable read on any frontend: a read barrier, then the
// tree.
func (cl *clients) read(ctx context.Context, f *frontend.Frontend, id, k int) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	call := cl.r.hist.call()
	if err := f.Journal().ReadBarrier(ctx); err != nil {
		return // no outcome: a failed read constrains nothing
	}
	n, ok := f.Tree().Get(keyPath(k))
	if !ok {
		cl.r.failf("register %s missing on frontend %d after a read barrier", keyPath(k), f.ID())
		return
	}
	cl.r.hist.done(id, call, linearize.KV{Key: keyPath(k)}, n.Attrs["v"].Str(), true)
}

// readLocal reads the frontend's tree without a barrier: it may be stale,
// but never older than the last local read of that tree.
func (cl *clients) readLocal(f *frontend.Frontend) {
	t := f.Tree()
	idx := t.Index()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if last := cl.local[t]; idx < last {
		cl.r.failf("a local read on frontend %d saw index %d after one that saw %d", f.ID(), idx, last)
	}
	cl.local[t] = idx
	cl.r.hist.counted()
}

// create makes a unique node with a precondition batch (the registers'
// directory exists, the node does not), retried through other frontends
// until it is acknowledged or the attempts run out. A retry whose
// precondition fails finds the node an earlier attempt of unknown outcome
// made: it counts as acknowledged.
func (cl *clients) create(ctx context.Context, rng *rand.Rand, id int, name string) {
	path := "/acked/" + name
	b := catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCheck, Path: "/kv", Cond: catalog.Cond{Exists: true}},
		{Type: catalog.OpCreate, Path: path, Kind: "item", Cond: catalog.Cond{Absent: true}},
	}}
	for attempt := range 4 {
		up := cl.r.running()
		if len(up) == 0 || ctx.Err() != nil {
			break
		}
		f := cl.r.c.Frontend(up[rng.IntN(len(up))])
		if f == nil {
			continue
		}
		res, err := f.Write(ctx, b)
		switch {
		case res == nil:
			cl.r.hist.event("create %s attempt %d unknown", path, attempt)
			continue
		case err == nil || (attempt > 0 && errors.Is(err, catalog.ErrConflict)):
			cl.mu.Lock()
			cl.acked = append(cl.acked, path)
			cl.mu.Unlock()
			cl.r.hist.event("create %s acked", path)
			cl.r.hist.counted()
		default:
			cl.r.failf("create %s through frontend %d (attempt %d): %v", path, f.ID(), attempt+1, err)
		}
		return
	}
}
