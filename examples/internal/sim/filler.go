package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
)

// fillDir holds the filler's nodes.
const fillDir = "/fill"

// filler is a workload step of the runs with a quota: now and then it
// fills the catalog to within a byte of its bytes quota (or, with a
// node quota only, to the last node), holds it full for a while and
// drains it again (deletes always pass). While it is full, only batches
// that do not grow the catalog and the member records under
// heartbeat.ClusterPath (catalog.Quota.Exempt) land: the worker
// nemesis's restarts, stops and cuts must still be journaled, which the
// query checks and checkRecords judge. The run's last fill stays, so
// that the workers' returns at the end of the faults and checkRecords
// meet a full catalog.
type filler struct {
	r    *run
	wg   sync.WaitGroup
	stop context.CancelFunc

	mu sync.Mutex
	// fills counts the times the catalog was found within a byte (or at
	// the last node) of its quota after a fill; transitions the member
	// records' generations journaled while it was full.
	fills, transitions int
	pads               []pad // the filler's nodes in the catalog
	seq                int
}

// pad is one of the filler's nodes and the length of its value.
type pad struct {
	path string
	n    int
}

// startFiller starts the filler in a run with a quota; nil otherwise.
func (r *run) startFiller(ctx context.Context, rng *rand.Rand) *filler {
	if r.cfg.Quota.MaxNodes == 0 && r.cfg.Quota.MaxBytes == 0 {
		return nil
	}
	fl := &filler{r: r}
	ctx, fl.stop = context.WithCancel(ctx)
	fl.wg.Go(func() { fl.loop(ctx, rng) })
	return fl
}

func (fl *filler) loop(ctx context.Context, rng *rand.Rand) {
	for pause(ctx, time.Duration(3000+rng.IntN(7000))*time.Millisecond) {
		fl.fillAndHold(ctx, time.Duration(2000+rng.IntN(6000))*time.Millisecond)
		fl.drain(ctx)
	}
}

// end stops the loop and fills the catalog a last time, left full.
func (fl *filler) end(ctx context.Context) {
	if fl == nil {
		return
	}
	fl.stop()
	fl.wg.Wait()
	fl.fillAndHold(ctx, 0)
}

// fillAndHold fills the catalog and holds it for d, counting the member
// transitions journaled meanwhile.
func (fl *filler) fillAndHold(ctx context.Context, d time.Duration) {
	if !fl.fill(ctx) {
		return
	}
	before := fl.generations()
	pause(ctx, d)
	after := fl.generations()
	fl.mu.Lock()
	fl.fills++
	if before >= 0 && after > before {
		fl.transitions += after - before
	}
	fl.mu.Unlock()
	fl.r.hist.event("catalog filled to its quota, held %v", d)
}

// generations is the sum of the member records' generations on the
// leader, or -1 without a leader.
func (fl *filler) generations() int {
	l := fl.r.leader()
	f := fl.r.c.Frontend(l)
	if l == 0 || f == nil {
		return -1
	}
	n := 0
	for _, m := range f.Members().Members() {
		n += int(m.Generation)
	}
	return n
}

// write proposes ops through the leader, if any.
func (fl *filler) write(ctx context.Context, ops ...catalog.Op) (*catalog.Tree, error) {
	l := fl.r.leader()
	f := fl.r.c.Frontend(l)
	if l == 0 || f == nil {
		return nil, journal.ErrNoLeader
	}
	wctx, cancel := context.WithTimeout(ctx, fl.r.timeout)
	defer cancel()
	_, err := f.Write(wctx, catalog.Batch{Ops: ops})
	return f.Tree(), err
}

// usage is the leader's catalog usage after a barrier-free read: the
// leader applied its own writes when they returned.
func (fl *filler) usage() (catalog.Usage, bool) {
	l := fl.r.leader()
	f := fl.r.c.Frontend(l)
	if l == 0 || f == nil {
		return catalog.Usage{}, false
	}
	return f.Tree().Usage(), true
}

// fill brings the catalog to within a byte of its bytes quota (or to
// the last node of its node quota): a few rounds, each reading the
// leader's usage and creating or resizing one of its nodes, since the
// clients write meanwhile. It reports whether the catalog ended full.
func (fl *filler) fill(ctx context.Context) bool {
	q := fl.r.cfg.Quota
	if _, err := fl.write(ctx, catalog.Op{Type: catalog.OpCreate, Path: fillDir, Kind: "dir"}); err != nil {
		fl.r.quotaRefused(err) // or it exists already, or no leader: the rounds find out
	}
	for range 8 {
		u, ok := fl.usage()
		if !ok || ctx.Err() != nil {
			return false
		}
		if full(q, u) {
			return true
		}
		if q.MaxBytes == 0 {
			n := q.MaxNodes - u.Nodes
			ops := make([]catalog.Op, 0, n)
			fl.mu.Lock()
			for range n {
				fl.seq++
				p := pad{path: fmt.Sprintf("%s/n%d", fillDir, fl.seq)}
				fl.pads = append(fl.pads, p)
				ops = append(ops, catalog.Op{Type: catalog.OpCreate, Path: p.path, Kind: "pad"})
			}
			fl.mu.Unlock()
			if _, err := fl.write(ctx, ops...); err != nil {
				fl.r.quotaRefused(err)
			}
			continue
		}
		rem := q.MaxBytes - u.Bytes
		fl.mu.Lock()
		var last pad
		grow := len(fl.pads) > 0 && (q.MaxNodes == 0 || u.Nodes >= q.MaxNodes || rem < 256)
		if grow {
			last = fl.pads[len(fl.pads)-1]
		} else {
			fl.seq++
			last = pad{path: fmt.Sprintf("%s/b%d", fillDir, fl.seq)}
		}
		fl.mu.Unlock()
		n := last.n + int(rem) - 1
		if !grow {
			n = int(rem) - 256 // the node's record, name and key take the rest
		}
		n = max(0, min(n, catalog.MaxValueLen))
		op := catalog.Op{Type: catalog.OpCreate, Path: last.path, Kind: "pad", Set: map[string]catalog.Value{"p": catalog.String(string(make([]byte, n)))}}
		if grow {
			op = catalog.Op{Type: catalog.OpUpdate, Path: last.path, Set: op.Set}
		}
		// A refusal (the clients grew the catalog meanwhile) leaves the
		// pad as it was: the next round reads the usage again, and a
		// shrink always passes.
		if _, err := fl.write(ctx, op); err != nil {
			fl.r.quotaRefused(err)
			continue
		}
		fl.mu.Lock()
		if grow {
			fl.pads[len(fl.pads)-1].n = n
		} else {
			fl.pads = append(fl.pads, pad{path: last.path, n: n})
		}
		fl.mu.Unlock()
	}
	u, ok := fl.usage()
	return ok && full(q, u)
}

// full reports whether u is within a byte of q's bytes bound, or at its
// node bound.
func full(q catalog.Quota, u catalog.Usage) bool {
	if q.MaxBytes > 0 {
		if rem := q.MaxBytes - u.Bytes; rem >= 0 && rem <= 1 {
			return true
		}
	}
	return q.MaxNodes > 0 && u.Nodes >= q.MaxNodes
}

// drain deletes the filler's nodes. It forgets them whatever the
// outcome: the next fill reads the usage, and names new nodes.
func (fl *filler) drain(ctx context.Context) {
	if _, err := fl.write(ctx, catalog.Op{Type: catalog.OpDelete, Path: fillDir, Recursive: true}); err != nil {
		fl.r.hist.event("drain the filler: %v", err)
	}
	fl.mu.Lock()
	fl.pads = nil
	fl.mu.Unlock()
}

// counts returns the fills and the member transitions journaled while
// full.
func (fl *filler) counts() (fills, transitions int) {
	if fl == nil {
		return 0, 0
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.fills, fl.transitions
}
