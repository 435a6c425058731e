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
	"github.com/metatree/metatree/journal"
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
	// httpLocal holds, per register of a tree, what the HTTP clients'
	// local GETs of it saw.
	httpLocal map[httpLocal]localSeen
}

func startClients(ctx context.Context, r *run, n int, seed uint64) *clients {
	ctx, cancel := context.WithCancel(ctx)
	cl := &clients{r: r, cancel: cancel, local: map[*catalog.Tree]uint64{}, httpLocal: map[httpLocal]localSeen{}}
	for id := range n {
		rng := rand.New(rand.NewPCG(seed, uint64(id)))
		cl.wg.Go(func() { cl.loop(ctx, id, rng) })
	}
	cl.startHTTP(ctx, 1+int(seed%2), n, seed)
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
		case p < 27:
			cl.put(ctx, f, id, rng.IntN(keys), value)
		case p < 35:
			cl.putRetried(ctx, rng, id, rng.IntN(keys), value)
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
	// an update of an existing register never has). Without one, an error
	// that does not wrap ErrOutcomeUnknown says the write did not and will
	// not apply: it leaves the history, so a read that sees its value
	// fails the check.
	switch {
	case res != nil && cl.r.quotaRefused(err):
		cl.r.hist.failed(in)
	case res != nil && err != nil:
		cl.r.failf("put %s=%s through frontend %d failed as a batch: %v", keyPath(k), value, f.ID(), err)
		cl.r.hist.done(id, call, in, nil, false)
	case res != nil:
		cl.r.hist.done(id, call, in, nil, true)
	case definite(err):
		cl.r.hist.failed(in)
	default:
		cl.r.hist.done(id, call, in, nil, false)
	}
}

// definite reports whether err, a write's error without a result, says
// the write did not and will not apply (journal.Propose's contract):
// anything but ErrOutcomeUnknown.
func definite(err error) bool {
	return err != nil && !errors.Is(err, journal.ErrOutcomeUnknown)
}

// putRetried puts a register as a client that loses acknowledgements
// does: the same batch under one idempotency key, proposed through a
// random frontend and, while its outcome is unknown, again through
// another, up to three times (keyedPut records it).
func (cl *clients) putRetried(ctx context.Context, rng *rand.Rand, id, k int, value string) {
	var key [16]byte
	for i := range key {
		key[i] = byte(rng.Uint32())
	}
	p := cl.r.newKeyedPut(id, k, value, key)
	defer p.finish()
	for attempt := range 3 {
		up := cl.r.running()
		if len(up) == 0 || ctx.Err() != nil {
			return
		}
		f := cl.r.c.Frontend(up[rng.IntN(len(up))])
		if f == nil {
			continue
		}
		ok, err := p.attempt(ctx, f)
		if ok {
			return
		}
		if !definite(err) {
			cl.r.hist.event("keyed put %s=%s attempt %d through %d unknown", keyPath(k), value, attempt, f.ID())
		}
	}
}

func putBatch(k int, value string) catalog.Batch {
	return catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpUpdate, Path: keyPath(k), Set: map[string]catalog.Value{"v": catalog.String(value)}},
	}}
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
	case res == nil && definite(err):
		cl.r.hist.failed(in)
	case res == nil:
		cl.r.hist.done(id, call, in, nil, false)
	case err == nil:
		cl.r.hist.done(id, call, in, true, true)
	case errors.Is(err, catalog.ErrConflict):
		cl.r.hist.done(id, call, in, false, true)
	case cl.r.quotaRefused(err):
		cl.r.hist.failed(in)
	default:
		cl.r.failf("cas %s through frontend %d failed as a batch: %v", keyPath(k), f.ID(), err)
		cl.r.hist.done(id, call, in, nil, false)
	}
}

// read is a linearizable read on any frontend: a read barrier, then the
// tree. It reports whether the read completed.
func (cl *clients) read(ctx context.Context, f *frontend.Frontend, id, k int) bool {
	ctx, cancel := context.WithTimeout(ctx, cl.r.timeout)
	defer cancel()
	call := cl.r.hist.call()
	if err := f.Journal().ReadBarrier(ctx); err != nil {
		return false // no outcome: a failed read constrains nothing
	}
	n, ok := f.Tree().Get(keyPath(k))
	if !ok {
		cl.r.failf("register %s missing on frontend %d after a read barrier", keyPath(k), f.ID())
		return false
	}
	cl.r.hist.done(id, call, linearize.KV{Key: keyPath(k)}, n.Attrs["v"].Str(), true)
	return true
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
		case cl.r.quotaRefused(err):
			cl.r.hist.event("create %s refused by the quota", path)
		default:
			cl.r.failf("create %s through frontend %d (attempt %d): %v", path, f.ID(), attempt+1, err)
		}
		return
	}
}
