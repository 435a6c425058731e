package image

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// A node that may not checkpoint by shadow replay (typically the raft
// leader, see CheckpointerConfig.Enabled) would otherwise never write an
// image, and raft never compacts a log behind no image: the leader's log
// would grow for as long as it leads. Instead it adopts an image a peer
// wrote. That is sound because images are deterministic: every replica
// that applied the same entries saves the same bytes, and raft's log
// matching property makes "this node's log has term T at index I" prove
// that the entries up to I are the peer's. The image is kept on disk only;
// the live state, already past I, is not touched.

// peerOffer is one peer's newest image, as GET /image/latest reported it.
type peerOffer struct {
	addr string
	info RemoteInfo
}

// adoptOrFallBack adopts a peer's image or, failing that and when
// configured, checkpoints by shadow replay.
func (c *Checkpointer) adoptOrFallBack(ctx context.Context) (outcome, error) {
	out, err := c.adopt(ctx)
	if err == nil || !errors.Is(err, ErrNoPeerImage) || !c.cfg.ShadowFallback {
		return out, err
	}
	c.logger.Warn("no peer image to adopt; checkpointing by shadow replay here instead (ShadowFallback)", "err", err)
	return c.shadowReplay(ctx)
}

// adopt records the newest suitable peer image as this node's own.
func (c *Checkpointer) adopt(ctx context.Context) (outcome, error) {
	s := c.cfg.Store
	idx, err := s.Indexes()
	if err != nil {
		return outcome{}, err
	}
	recorded, err := c.retryPending(ctx, idx)
	if err != nil {
		return outcome{}, err
	}
	var base uint64
	if len(idx) > 0 {
		base = idx[0]
	}
	applied := c.cfg.Applied()
	offers, problems := c.askPeers(ctx)
	if err := ctx.Err(); err != nil {
		return outcome{}, context.Cause(ctx)
	}
	// Newest first; among equals, the order Peers gave.
	slices.SortStableFunc(offers, func(a, b peerOffer) int { return cmp.Compare(b.info.Index, a.info.Index) })
	for _, o := range offers {
		switch i := o.info.Index; {
		case i <= base:
			problems = append(problems, fmt.Errorf("peer %s: newest image %d is not past this node's newest image %d", o.addr, i, base))
			continue
		case i > applied:
			problems = append(problems, fmt.Errorf("peer %s: newest image %d is past this node's applied index %d", o.addr, i, applied))
			continue
		}
		info, err := s.adopt(ctx, o.addr, o.info.Index, c.sameHistory)
		if err != nil {
			if ctx.Err() != nil {
				return outcome{}, err
			}
			c.logger.Warn("adopting a peer's image failed; trying the next peer", "peer", o.addr, "index", o.info.Index, "err", err)
			problems = append(problems, fmt.Errorf("peer %s: %w", o.addr, err))
			continue
		}
		out := outcome{info: info, wrote: true, source: o.addr}
		if err := c.record(ctx, info); err != nil {
			c.pending = &out
			return outcome{}, err
		}
		return out, nil
	}
	if recorded != nil {
		// Recording the image that failed before was this round's progress.
		return *recorded, nil
	}
	if len(problems) == 0 {
		problems = append(problems, errors.New("no peer to ask (CheckpointerConfig.Peers returned no address)"))
	}
	return outcome{}, fmt.Errorf("%w (newest image here %d, applied %d): %w", ErrNoPeerImage, base, applied, errors.Join(problems...))
}

// askPeers asks every peer for its newest image, all at once (a dead peer
// costs one FetchIdleTimeout, not one per peer), and waits for every
// answer.
func (c *Checkpointer) askPeers(ctx context.Context) ([]peerOffer, []error) {
	addrs := c.cfg.Peers()
	offers := make([]*peerOffer, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for k, addr := range addrs {
		wg.Go(func() {
			ri, err := c.cfg.Store.RemoteLatest(ctx, addr)
			switch {
			case errors.Is(err, ErrNotFound):
				errs[k] = fmt.Errorf("peer %s: has no image", addr)
			case err != nil:
				errs[k] = fmt.Errorf("peer %s: %w", addr, err)
			default:
				offers[k] = &peerOffer{addr: addr, info: ri}
			}
		})
	}
	wg.Wait()
	var out []peerOffer
	for _, o := range offers {
		if o != nil {
			out = append(out, *o)
		}
	}
	var problems []error
	for _, err := range errs {
		if err != nil {
			problems = append(problems, err)
		}
	}
	return out, problems
}

// sameHistory accepts a peer's image only if this node's log has the
// image's term at its index: then, by raft's log matching property, every
// entry up to it is the same here, and so is the image.
func (c *Checkpointer) sameHistory(h Header) error {
	term, err := c.cfg.Journal.TermAt(h.Index)
	if err != nil {
		return fmt.Errorf("cannot compare its term with this node's log: %w", err)
	}
	if term != h.Term {
		return fmt.Errorf("it has term %d at index %d, this node's log term %d: not this node's history", h.Term, h.Index, term)
	}
	return nil
}
