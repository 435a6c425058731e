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
)

// watchPrefix is what the watchers watch: the clients' registers.
const watchPrefix = "/kv"

// watchers is how many watchers a run has.
const watchers = 2

// seen is one event as a watcher saw it.
type seen struct {
	index uint64
	op    catalog.OpType
	path  string
	value string // the register's value after the event; "" for a delete
}

// segment is one watch session: on one frontend, resumed after from, the
// events it delivered, and the index up to which it saw every event
// (upTo: its last event's, or what Progress reported when it was idle).
type segment struct {
	watcher  int
	frontend int
	from     uint64
	upTo     uint64
	events   []seen
	// era counts the cuts (cut.go) recorded before the session started.
	era int
}

// watches are the run's watchers: each watches the registers on a random
// frontend for a while, disconnects and resumes on another, from the last
// index it saw or, now and then, from the first index the log holds an
// image for (FirstIndex()-1) or from an index the log no longer holds,
// where catalog.ErrCompacted is the right answer.
type watches struct {
	r    *run
	stop context.CancelFunc
	wg   sync.WaitGroup

	// final is the index end read the registers at, values what it read.
	final  uint64
	values map[string]*catalog.Node

	mu       sync.Mutex
	segments []*segment
	resumes  int // resumed sessions
	// cuts are the indexes up to which the old cluster and the new one
	// agree at each operator's recovery (cutAt), in order.
	cuts []uint64
}

// newSegment starts the record of a session of watcher k on frontend i,
// resumed after from, in the era of the cuts so far.
func (ws *watches) newSegment(k, i int, from uint64) *segment {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return &segment{watcher: k, frontend: i, from: from, upTo: from, era: len(ws.cuts)}
}

// cutAt records an operator's recovery whose new cluster agrees with the
// old one's log up to index (its events after index may be lost). It is
// called once every process of the old cluster has stopped, before the
// new cluster starts: the sessions on the old cluster end on their own.
func (ws *watches) cutAt(index uint64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.cuts = append(ws.cuts, index)
}

// clipped returns the sessions as check compares them: a session of the
// old cluster (an era before a cut) keeps the events up to the index the
// new cluster agrees with, and covers no index past it.
func (ws *watches) clipped(segs []*segment) []*segment {
	ws.mu.Lock()
	cuts := slices.Clone(ws.cuts)
	ws.mu.Unlock()
	out := make([]*segment, 0, len(segs))
	for _, s := range segs {
		if s.era >= len(cuts) {
			out = append(out, s)
			continue
		}
		limit := cuts[s.era]
		c := *s
		c.events = slices.DeleteFunc(slices.Clone(s.events), func(e seen) bool { return e.index > limit })
		c.upTo = s.standingUpTo(cuts)
		out = append(out, &c)
	}
	return out
}

func (r *run) startWatches(ctx context.Context) *watches {
	ctx, cancel := context.WithCancel(ctx)
	ws := &watches{r: r, stop: cancel}
	rng := rand.New(rand.NewPCG(r.opts.Seed, 0x3a7c))
	for k := range watchers {
		wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(k)))
		ws.wg.Go(func() { ws.loop(ctx, k, wrng) })
	}
	hrng := rand.New(rand.NewPCG(rng.Uint64(), watchers))
	ws.wg.Go(func() { ws.httpWatcher(ctx, watchers, hrng) })
	return ws
}

// end stops the watchers and reads the registers on the leader at one
// index; then each watcher watches once more, on a quiet cluster, from its
// last index until it has seen that index, so that the check can compare
// the last event of each register up to it with its value there. (A write
// whose client gave up may still apply after; the comparison stops at the
// index read.)
func (ws *watches) end(ctx context.Context) {
	ws.stop()
	ws.wg.Wait()
	// Bounded: a cluster that lost its leader for good (a failed run) must
	// end the run with a report rather than wait on virtual time for ever.
	lctx, cancel := context.WithTimeout(ctx, RecoveryBound)
	l, err := ws.r.c.Leader(lctx)
	cancel()
	if err != nil {
		ws.r.failf("watches: no leader at the end: %v", err)
		return
	}
	final, values, ok := registers(ws.r.c.Frontend(l).Tree())
	if !ok {
		ws.r.failf("watches: the leader's catalog never held still to be read")
		return
	}
	ws.final, ws.values = final, values
	for k := range watchers {
		from := ws.lastIndex(k)
		up := ws.r.running()
		i := up[k%len(up)]
		seg, err := ws.session(ctx, k, i, from, 0, final)
		if errors.Is(err, catalog.ErrCompacted) {
			// Right if the log no longer holds an image at or below from
			// (checked as in loop); a client then re-reads and watches
			// from where the log starts.
			ws.judgeCompacted(k, i, from, err)
			if f := ws.r.c.Frontend(i); f != nil {
				if fi, ferr := f.Journal().FirstIndex(); ferr == nil && fi > 0 {
					from = fi - 1
					seg, err = ws.session(ctx, k, i, from, 0, final)
				}
			}
		}
		if err != nil {
			ws.r.failf("watcher %d: the final resume from %d on frontend %d: %v", k, from, i, err)
			continue
		}
		if seg.upTo < final {
			ws.r.failf("watcher %d: the final watch on frontend %d from %d saw up to %d, not the final index %d", k, i, from, seg.upTo, final)
		}
	}
}

// judgeCompacted fails the run if watcher k's resume after from on
// frontend i failed with catalog.ErrCompacted while the frontend's log
// holds every entry after an image at or below from.
func (ws *watches) judgeCompacted(k, i int, from uint64, err error) {
	f := ws.r.c.Frontend(i)
	if f == nil {
		return
	}
	fi, ferr := f.Journal().FirstIndex()
	if ferr != nil || from+1 < fi {
		return
	}
	// The log holds every entry after from, so the image it starts after
	// (at or below from) must be in the store: the resume has a base.
	kept, _ := f.Images().Indexes()
	ws.r.failf("watcher %d: resuming after %d on frontend %d failed with %v, while its log holds every entry after its image at %d (images kept: %v)", k, from, i, err, fi-1, kept)
}

// registers reads every register's node (nil: absent) at one index of t,
// retrying while t applies.
func registers(t *catalog.Tree) (uint64, map[string]*catalog.Node, bool) {
	for range 100 {
		at := t.Index()
		values := map[string]*catalog.Node{}
		paths := []string{watchPrefix}
		for k := range keys {
			paths = append(paths, keyPath(k))
		}
		for _, p := range paths {
			if n, ok := t.Get(p); ok {
				values[p] = &n
			}
		}
		if t.Index() == at {
			return at, values, true
		}
	}
	return 0, nil, false
}

// lastIndex is the index up to which watcher k last saw every event that
// still stands: a session of the old cluster counts up to the cut that
// ended its era (clipped), since the new cluster goes on from there with
// batches of its own at the indexes after it. Resumed from an old
// cluster's later index, a watch on the new one would skip those batches
// (WatchFrom skips up to a from above its tree's index): a client told of
// the recovery re-reads instead, as this resume point does.
//
// Only watcher k's own goroutine writes its sessions, so it reads their
// upTo here without racing.
func (ws *watches) lastIndex(k int) uint64 {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var last uint64
	for _, s := range ws.segments {
		if s.watcher != k {
			continue
		}
		last = max(last, s.standingUpTo(ws.cuts))
	}
	return last
}

func (ws *watches) loop(ctx context.Context, k int, rng *rand.Rand) {
	for pause(ctx, time.Duration(50+rng.IntN(1000))*time.Millisecond) {
		i, from, ok := ws.resumePoint(k, rng)
		if !ok {
			continue
		}
		_, err := ws.session(ctx, k, i, from, time.Duration(100+rng.IntN(5000))*time.Millisecond, 0)
		if errors.Is(err, catalog.ErrCompacted) {
			ws.judgeCompacted(k, i, from, err)
		}
	}
}

// resumePoint draws where watcher k resumes next: a random running
// frontend, and after the last index it saw, the first index that
// frontend's log holds an image for, or an older index, perhaps compacted
// away.
func (ws *watches) resumePoint(k int, rng *rand.Rand) (i int, from uint64, ok bool) {
	up := ws.r.running()
	if len(up) == 0 {
		return 0, 0, false
	}
	i = up[rng.IntN(len(up))]
	f := ws.r.c.Frontend(i)
	if f == nil {
		return 0, 0, false
	}
	from = ws.lastIndex(k)
	switch p := rng.IntN(100); {
	case p < 15: // the first index the log holds an image for
		if fi, err := f.Journal().FirstIndex(); err == nil && fi > 0 {
			from = fi - 1
		}
	case p < 25: // an old index, perhaps compacted away
		from /= uint64(2 + rng.IntN(8))
	}
	return i, from, true
}

// session watches the registers on frontend i, resumed after from, for d
// (or, with d 0, until it has seen index until), and records what it saw.
// It returns the error of the resume; the session's end (d passed, the
// frontend stopped, the watcher fell behind) is no error.
func (ws *watches) session(ctx context.Context, k, i int, from uint64, d time.Duration, until uint64) (*segment, error) {
	seg := ws.newSegment(k, i, from) // in the era of the frontend taken next
	f := ws.r.c.Frontend(i)
	if f == nil {
		return nil, fmt.Errorf("frontend %d is not running", i)
	}
	emit := func(ev catalog.Event) error {
		seg.add(ev)
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	w, err := f.Tree().WatchFrom(rctx, from, catalog.WatchOptions{Prefix: watchPrefix}, f.History(), emit)
	cancel()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	ws.mu.Lock()
	ws.segments = append(ws.segments, seg)
	ws.resumes++
	ws.mu.Unlock()
	if d == 0 {
		d = time.Minute
	}
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		if idx, ok := w.Progress(); ok {
			seg.reached(idx)
			if until > 0 && idx >= until {
				return seg, nil
			}
		}
		ev, ok, err := w.TryNext()
		if err != nil {
			return seg, nil // cut off for falling behind: the session ends
		}
		if ok && ev.Op == catalog.OpResync {
			// The frontend loaded an image under the watcher: the events
			// between are not delivered, and a client re-reads. The session
			// ends at what it saw before.
			return seg, nil
		}
		if ok {
			seg.add(ev)
			continue
		}
		if !pause(sctx, 20*time.Millisecond) {
			return seg, nil
		}
	}
}

func (s *segment) add(ev catalog.Event) {
	e := seen{index: ev.Index, op: ev.Op}
	switch {
	case ev.After != nil:
		e.path, e.value = ev.After.Path, ev.After.Attrs["v"].Str()
	case ev.Before != nil:
		e.path = ev.Before.Path
	}
	s.events = append(s.events, e)
	s.upTo = max(s.upTo, ev.Index)
}

func (s *segment) reached(idx uint64) { s.upTo = max(s.upTo, idx) }

// standingUpTo is the index up to which the session saw every event that
// still stands after cuts: a session of an era that a cut ended counts
// up to that cut.
func (s *segment) standingUpTo(cuts []uint64) uint64 {
	if s.era < len(cuts) {
		return min(s.upTo, cuts[s.era])
	}
	return s.upTo
}

// check requires every session's events in log order, each once, and
// every two sessions that saw an index to have seen the same events at
// it: a session that missed an event, repeated one or delivered one of
// another batch disagrees with the others. The final sessions, which
// reach the final index, must end on each register's final value.
func (ws *watches) check() {
	ws.mu.Lock()
	segs := slices.Clone(ws.segments)
	ws.mu.Unlock()
	segs = ws.clipped(segs)
	ref := map[uint64][]seen{} // the events at an index, as the first session that covered it saw them
	refBy := map[uint64]*segment{}
	for _, s := range segs {
		byIndex := map[uint64][]seen{}
		var last seen
		for n, e := range s.events {
			if e.index <= s.from {
				ws.r.failf("watcher %d on frontend %d, resumed after %d: event %d (%v %s) is not after it", s.watcher, s.frontend, s.from, e.index, e.op, e.path)
			}
			if n > 0 && (e.index < last.index || e == last) {
				ws.r.failf("watcher %d on frontend %d, resumed after %d: event %d (%v %s) after %d (%v %s): out of order or twice", s.watcher, s.frontend, s.from, e.index, e.op, e.path, last.index, last.op, last.path)
			}
			last = e
			byIndex[e.index] = append(byIndex[e.index], e)
		}
		// Compare every index the session covered with the reference.
		for idx, r := range ref {
			if idx <= s.from || idx > s.upTo {
				continue
			}
			if !slices.Equal(byIndex[idx], r) {
				o := refBy[idx]
				ws.r.failf("at index %d watcher %d on frontend %d (after %d) saw %v, watcher %d on frontend %d (after %d) %v", idx, s.watcher, s.frontend, s.from, byIndex[idx], o.watcher, o.frontend, o.from, r)
			}
		}
		for idx, evs := range byIndex {
			if _, ok := ref[idx]; !ok {
				// Earlier sessions that covered idx saw nothing there.
				for _, o := range segs {
					if o == s {
						break
					}
					if idx > o.from && idx <= o.upTo {
						ws.r.failf("at index %d watcher %d on frontend %d (after %d) saw %v, watcher %d on frontend %d (after %d) nothing", idx, s.watcher, s.frontend, s.from, evs, o.watcher, o.frontend, o.from)
						break
					}
				}
				ref[idx], refBy[idx] = evs, s
			}
		}
	}
	// Each register's last event up to the final index ends on its value
	// there.
	if ws.values == nil {
		return
	}
	last := map[string]seen{}
	for _, evs := range ref {
		for _, e := range evs {
			if v, ok := last[e.path]; e.index <= ws.final && (!ok || e.index >= v.index) {
				last[e.path] = e
			}
		}
	}
	for p, e := range last {
		n := ws.values[p]
		switch {
		case e.op == catalog.OpDelete && n != nil:
			ws.r.failf("watchers saw %s deleted at %d, but it is there at the final index %d", p, e.index, ws.final)
		case e.op != catalog.OpDelete && (n == nil || n.Attrs["v"].Str() != e.value):
			ws.r.failf("watchers saw %s = %q last, at %d, but the final index %d holds %v", p, e.value, e.index, ws.final, n)
		}
	}
}
