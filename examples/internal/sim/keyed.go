package sim

import (
	"context"
	"fmt"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/internal/linearize"
)

// keyedPut is one register put proposed, perhaps several times through
// several frontends, under one idempotency key, as the history records
// it. journal.ProposeWithKey applies the copies once only while each
// reaches the log within the dedupe window of the copy before it: a
// retry whose copy lands further on applies again. So:
//
//   - the put is one operation from its first call to the return of the
//     first attempt that applied (or of unknown outcome, or failed, when
//     none did);
//   - when an attempt of unknown outcome came before the one that
//     applied, its copy may have applied too, more than a window earlier:
//     it is an operation of its own, of unknown outcome, from that call;
//   - an attempt that applies at another index than the first applied
//     copy applied twice: an operation of its own, and a failure when it
//     landed within the window (the dedupe lost a copy).
type keyedPut struct {
	r       *run
	client  int
	k       int
	in      linearize.KV
	key     [16]byte
	call    int64  // the first attempt's call
	index   uint64 // the first applied copy's index; 0 before
	unknown bool   // an attempt of unknown outcome came before
}

func (r *run) newKeyedPut(client, k int, value string, key [16]byte) *keyedPut {
	return &keyedPut{r: r, client: client, k: k, key: key, in: linearize.KV{Put: true, Key: keyPath(k), Value: value}, call: r.hist.call()}
}

// attempt proposes the put through f, records what it tells, and
// reports whether it applied (or was found applied).
func (p *keyedPut) attempt(ctx context.Context, f *frontend.Frontend) (bool, error) {
	call := p.r.hist.call()
	idx, err := p.r.proposeKeyed(ctx, f, p.key, putBatch(p.k, p.in.Value))
	switch {
	case err == nil && p.index == 0:
		p.index = idx
		p.r.hist.done(p.client, p.call, p.in, nil, true)
		if p.unknown {
			p.r.hist.done(p.client, p.call, p.in, nil, false)
		}
	case err == nil && idx != p.index:
		if idx > p.index && idx-p.index <= p.r.window() {
			p.r.failf("keyed put %s=%s applied at %d and again at %d through frontend %d, within the dedupe window of %d entries", p.in.Key, p.in.Value, p.index, idx, f.ID(), p.r.window())
		}
		p.r.hist.done(p.client, call, p.in, nil, true)
	case err == nil:
	case !definite(err) && p.index != 0:
		p.r.hist.done(p.client, call, p.in, nil, false)
	case !definite(err):
		p.unknown = true
	}
	return err == nil, err
}

// finish records the put when no attempt applied.
func (p *keyedPut) finish() {
	switch {
	case p.index != 0:
	case p.unknown:
		p.r.hist.done(p.client, p.call, p.in, nil, false)
	default:
		p.r.hist.failed(p.in)
	}
}

// window is the cluster's dedupe window: as wide as the compaction
// margin the run bootstraps with.
func (r *run) window() uint64 { return r.cfg.CompactMargin }

// proposeKeyed proposes b through f's journal under the idempotency key,
// encoded at the cluster's version, within the frontends' request
// timeout, and returns the index of the copy that applied. A batch that
// applied as a failure (a quota's refusal) changed nothing: its error is
// returned.
func (r *run) proposeKeyed(ctx context.Context, f *frontend.Frontend, key [16]byte, b catalog.Batch) (uint64, error) {
	data, err := b.EncodeVersion(frontend.BatchVersion(f.Journal().ClusterVersion()))
	if err != nil {
		return 0, fmt.Errorf("encode: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	idx, v, err := f.Journal().ProposeWithKey(ctx, key, data)
	if res, ok := v.(*catalog.Result); ok && err == nil && res.Err != nil {
		return 0, res.Err
	}
	return idx, err
}
