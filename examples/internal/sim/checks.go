package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/internal/linearize"
	"github.com/metatree/metatree/journal"
)

// recover heals every fault and starts every stopped frontend, then
// requires a leader and an accepted write within RecoveryBound.
func (r *run) recover(ctx context.Context) {
	net := r.c.Network()
	net.Heal()
	net.ClearFaults()
	for _, i := range r.ids() {
		if r.c.Frontend(i) == nil {
			r.restart(ctx, i, "after the faults healed")
		}
	}
	healed := time.Now()
	r.healed = healed
	bctx, cancel := context.WithTimeout(ctx, RecoveryBound)
	defer cancel()
	for {
		err := r.acceptedWrite(bctx)
		if err == nil {
			return
		}
		if bctx.Err() != nil {
			r.failf("no leader with an accepted write within %v of healing (%v after): %v", RecoveryBound, time.Since(healed), err)
			return
		}
		pause(bctx, 100*time.Millisecond)
	}
}

// acceptedWrite writes a marker through the agreed leader.
func (r *run) acceptedWrite(ctx context.Context) error {
	l, err := r.c.Leader(ctx)
	if err != nil {
		return err
	}
	f := r.c.Frontend(l)
	if f == nil {
		return errors.New("the leader stopped")
	}
	_, err = f.Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCheck, Path: "/kv", Cond: catalog.Cond{Exists: true}}}})
	return err
}

// check runs the checks of a run whose clients have stopped, on a healed
// cluster.
func (r *run) check(ctx context.Context, cl *clients) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// Final linearizable reads of every register on every frontend join
	// the history: every acknowledged write must show in them.
	for _, i := range r.running() {
		f := r.c.Frontend(i)
		if err := f.Journal().ReadBarrier(ctx); err != nil {
			r.failf("final read barrier on frontend %d: %v", i, err)
			continue
		}
		for k := range keys {
			call := r.hist.call()
			n, ok := f.Tree().Get(keyPath(k))
			if !ok {
				r.failf("register %s missing on frontend %d", keyPath(k), i)
				continue
			}
			r.hist.done(100+i, call, linearize.KV{Key: keyPath(k)}, n.Attrs["v"].Str(), true)
		}
	}
	r.checkLinearizable()
	r.checkConverged(ctx, cl)
	r.checkNoAlarm()
	r.checkImages(ctx)
}

// checkNoAlarm requires that the consistency checks, which every
// frontend runs (catalog.Tree is a journal.Digester), raised no alarm:
// the run's replicas are correct, so an alarm is a false one.
func (r *run) checkNoAlarm() {
	for _, i := range r.running() {
		st := r.c.Frontend(i).Journal().Status()
		if st.Alarm != nil {
			r.failf("frontend %d reports a consistency alarm on a correct cluster: %+v", i, *st.Alarm)
		}
		if errors.Is(st.Err, journal.ErrCorrupt) {
			r.failf("frontend %d raised the corruption alarm on a correct cluster: %v", i, st.Err)
		}
	}
}

// checkLinearizable checks the writes and linearizable reads with
// porcupine, each era between the run's cuts apart (eras). A failure
// names the registers whose history fails and leaves porcupine's
// visualization of that era's history in a file.
func (r *run) checkLinearizable() {
	all := eras(r.hist.operations(), r.hist.cutsSoFar())
	for n, ops := range all {
		what := "the history"
		if len(all) > 1 {
			what = fmt.Sprintf("era %d of %d of the history (cut by an operator's recovery)", n+1, len(all))
		}
		r.checkEra(what, fmt.Sprintf("sim-seed-%d-era-%d.html", r.opts.Seed, n+1), ops)
	}
}

// checkEra checks one linearizable history, what naming it.
func (r *run) checkEra(what, file string, ops []porcupine.Operation) {
	res, info := porcupine.CheckOperationsVerbose(linearize.KVModel, ops, 0)
	if res == porcupine.Ok {
		return
	}
	byKey := map[string][]porcupine.Operation{}
	for _, op := range ops {
		k := op.Input.(linearize.KV).Key
		byKey[k] = append(byKey[k], op)
	}
	var bad []string
	for k := range keys {
		if !porcupine.CheckOperations(linearize.KVModel, byKey[keyPath(k)]) {
			bad = append(bad, fmt.Sprintf("%s (%d operations)", keyPath(k), len(byKey[keyPath(k)])))
		}
	}
	msg := fmt.Sprintf("%s, %d register operations, is not linearizable: %v", what, len(ops), bad)
	path := filepath.Join(os.TempDir(), file)
	if err := porcupine.VisualizePath(linearize.KVModel, info, path); err == nil {
		msg += "; porcupine's view: " + path
	}
	r.failf("%s", msg)
}

// digestAt is a catalog digest and the index it was taken at.
type digestAt struct {
	index  uint64
	digest catalog.Digest
}

func (d digestAt) String() string { return fmt.Sprintf("index %d digest %v", d.index, d.digest) }

// checkConverged waits for every frontend to apply the same index, then
// requires the same catalog digest at it on all, and every acknowledged
// create present on all.
func (r *run) checkConverged(ctx context.Context, cl *clients) {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last map[int]digestAt
	for {
		last = map[int]digestAt{}
		same := true
		var first *digestAt
		for _, i := range r.running() {
			idx, d := r.c.Frontend(i).Tree().Digest()
			last[i] = digestAt{idx, d}
			if first == nil {
				first = &digestAt{idx, d}
			} else if first.index != idx {
				same = false
			}
		}
		if same {
			break
		}
		if !pause(wctx, 50*time.Millisecond) {
			r.failf("the frontends never reached one applied index: %v", last)
			return
		}
	}
	var ref *digestAt
	refID := 0
	for i, d := range last {
		if ref == nil {
			ref, refID = &d, i
			continue
		}
		if d.digest != ref.digest {
			r.failf("frontends %d and %d differ at index %d: digest %v vs %v", refID, i, d.index, ref.digest, d.digest)
		}
	}
	for _, i := range r.running() {
		t := r.c.Frontend(i).Tree()
		missing := 0
		for _, p := range cl.acked {
			if _, ok := t.Get(p); !ok {
				missing++
				if missing == 1 {
					r.failf("acknowledged create %s missing on frontend %d", p, i)
				}
			}
		}
		if missing > 1 {
			r.failf("frontend %d misses %d acknowledged creates in all", i, missing)
		}
	}
}

// checkImages is the differential check at the end of a run: on every
// frontend, the newest image and the image the log starts after (the one
// a checkpointer falls back to and a watch resumed from the log's start
// replays from), each loaded into a fresh catalog with the log replayed
// onto it up to the live catalog's index, give the live catalog's digest.
//
// The clients are stopped, but the leader still journals its clock stamps
// and the member records their transitions, so a checkpoint may compact
// the log under a check: a check whose log start moved while it replayed
// runs again, up to maxImageChecks times.
func (r *run) checkImages(ctx context.Context) {
	for _, i := range r.running() {
		f := r.c.Frontend(i)
		r.retryImageCheck(i, func() error {
			at, _ := f.Tree().Digest()
			return r.replayCheck(ctx, f, at, true)
		})
		// The image the log starts after, which the store must keep: the
		// log can be replayed from no other.
		r.retryImageCheck(i, func() error {
			first, err := f.Journal().FirstIndex()
			if err != nil || first <= 1 {
				return err
			}
			kept, err := f.Images().Indexes()
			if err != nil {
				return fmt.Errorf("its log starts after %d; list its images: %w", first-1, err)
			}
			if !slices.Contains(kept, first-1) {
				return fmt.Errorf("its log starts after %d, and its image store lacks that image (images kept: %v)", first-1, kept)
			}
			return r.replayCheck(ctx, f, first-1, true)
		})
	}
}

// maxImageChecks bounds the runs of one differential check on a quiet
// cluster whose log a checkpoint compacts under it.
const maxImageChecks = 5

// errMovedUnder means a checkpoint compacted the log under a differential
// check: the log start moved past what the check read.
var errMovedUnder = errors.New("the log start moved under the check")

// retryImageCheck runs check until it passes, fails for another reason
// than errMovedUnder, or ran maxImageChecks times; a failure fails the
// run, naming frontend i.
func (r *run) retryImageCheck(i int, check func() error) {
	var err error
	for range maxImageChecks {
		if err = check(); !errors.Is(err, errMovedUnder) {
			break
		}
	}
	if err != nil {
		r.failf("frontend %d: %v", i, err)
	}
}

// checkImagesNow runs the differential check on frontend i while the
// cluster runs (after a checkpoint): from its newest image and from the
// image its log starts after. The log and the images move meanwhile, so
// only a digest that differs is a finding; a compaction or an image
// pruned under the check is not.
func (r *run) checkImagesNow(ctx context.Context, i int) {
	f := r.c.Frontend(i)
	if f == nil {
		return
	}
	at, _ := f.Tree().Digest()
	if err := r.replayCheck(ctx, f, at, false); err != nil {
		r.failf("frontend %d: %v", i, err)
	}
	if first, err := f.Journal().FirstIndex(); err == nil && first > 1 {
		if err := r.replayCheck(ctx, f, first-1, false); err != nil {
			r.failf("frontend %d: %v", i, err)
		}
	}
}

// replayCheck loads f's newest image at or before from into a fresh
// catalog, replays the log onto it (ReadEntries, with the applier's
// duplicate skipping) up to the index of the live catalog's digest, and
// returns an error when the digests differ. With strict, failing to load
// or to replay is an error too (on a quiet cluster the image and the log
// it needs are kept).
func (r *run) replayCheck(ctx context.Context, f *frontend.Frontend, from uint64, strict bool) error {
	at, live := f.Tree().Digest()
	t := f.NewTree()
	firstBefore, _ := f.Journal().FirstIndex()
	info, err := f.Images().LoadAtOrBefore(ctx, t, min(from, at))
	if err != nil {
		if strict {
			if firstAfter, ferr := f.Journal().FirstIndex(); ferr == nil && firstAfter > firstBefore && ctx.Err() == nil {
				err = fmt.Errorf("%w (from %d to %d): %w", errMovedUnder, firstBefore, firstAfter, err)
			}
			return fmt.Errorf("load its newest image at or before %d: %w", from, err)
		}
		return nil
	}
	err = f.Journal().ReadEntries(ctx, info.Index, at, func(index uint64, data []byte) error {
		t.Apply(index, bytes.Clone(data))
		return nil
	})
	if err != nil {
		if strict {
			kept, _ := f.Images().Indexes()
			if firstAfter, ferr := f.Journal().FirstIndex(); ferr == nil && firstAfter > firstBefore && errors.Is(err, journal.ErrCompacted) {
				err = fmt.Errorf("%w (from %d to %d): %w", errMovedUnder, firstBefore, firstAfter, err)
			}
			return fmt.Errorf("replay the log from its image at %d (images kept: %v) to %d: %w", info.Index, kept, at, err)
		}
		return nil
	}
	if idx, d := t.Digest(); idx != at || d != live {
		return fmt.Errorf("its image at %d replayed to %d (reached %d) gives digest %v, the live catalog %v", info.Index, at, idx, d, live)
	}
	return nil
}
