package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/metatree/metatree/internal/operr"
)

// History is where a watch resumed from a past index finds the batches it
// missed: the retained log and a state to replay it on. The catalog does
// not know the journal; the host wires the two (see WatchFrom).
type History struct {
	// Base returns a fresh tree holding the state as of a log index at or
	// below at, and that index: an image loaded into New() and the image's
	// index, or New() itself and 0 when the log holds every batch from
	// index 1. The index is the image's, not the tree's own Index(): the
	// log goes on past the tree's last batch with entries that never reach
	// the catalog (membership changes, a new term's empty entry, the
	// leader's clock), and the log kept after an image starts right after
	// the image's index. WatchFrom replays the log after that index on the
	// tree and discards it.
	Base func(ctx context.Context, at uint64) (*Tree, uint64, error)
	// Entries calls fn for every committed batch in (after, upTo], in log
	// order, with the bytes Apply was given (journal.Journal.ReadEntries
	// does, once the journal has applied upTo). When the log no longer
	// holds them it fails with an error that wraps ErrCompacted. fn must
	// not retain data.
	Entries func(ctx context.Context, after, upTo uint64, fn func(index uint64, data []byte) error) error
}

// WatchFrom is Watch resumed after index from: it delivers every event of
// the batches after from, each once and in log order, whatever this tree
// has applied meanwhile. The events of batches in (from, Start()] are
// replayed from h on the caller's goroutine, through emit, before WatchFrom
// returns; the watcher delivers the rest through Next, as Watch does. If emit
// fails, WatchFrom closes the watcher and returns emit's error.
//
// When the log no longer holds the batches after from, the error wraps
// ErrCompacted: the caller must re-read what it needs and watch from the
// index it read at. A from above this tree's index (a client that saw a
// newer index on another replica) needs no replay: the watcher skips the
// batches up to from as this tree applies them.
//
// The replay applies the log to a copy of the state (h.Base), so it costs
// about what loading an image costs; the live tree is not locked for it.
// Live events queue in the watcher's buffer meanwhile: a replay that takes
// longer than the buffer lasts ends, as a slow consumer does, in ErrResync.
func (t *Tree) WatchFrom(ctx context.Context, from uint64, opts WatchOptions, h History, emit func(Event) error) (*Watcher, error) {
	w := t.watch(opts, from)
	to := w.Start()
	if from >= to {
		return w, nil
	}
	if err := replay(ctx, from, to, opts, h, emit); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// replay emits the events a watcher with opts receives for the batches in
// (from, to], by applying the log to a base state at or below from.
func replay(ctx context.Context, from, to uint64, opts WatchOptions, h History, emit func(Event) error) error {
	base, baseAt, err := h.Base(ctx, from)
	if err != nil {
		return operr.Errorf("catalog: watch from %d: base state: %w", from, err)
	}
	switch {
	case baseAt > from:
		return fmt.Errorf("catalog: watch from %d: the base state is at %d, past it", from, baseAt)
	case base.Index() > baseAt:
		return fmt.Errorf("catalog: watch from %d: the base state said to be at %d holds batch %d", from, baseAt, base.Index())
	}
	apply := func(index uint64, data []byte) error {
		// A batch that fails its preconditions fails here as it did live;
		// only an index out of order means the log and base disagree.
		if res := base.Apply(index, data).(*Result); errors.Is(res.Err, ErrApplied) {
			return operr.Errorf("catalog: watch from %d: replay batch %d: %w", from, index, res.Err)
		}
		return nil
	}
	if err := h.Entries(ctx, baseAt, from, apply); err != nil {
		return operr.Errorf("catalog: watch from %d: %w", from, err)
	}
	tap := &watchTap{f: newFilter(opts)}
	base.tap = tap
	err = h.Entries(ctx, from, to, func(index uint64, data []byte) error {
		if err := apply(index, data); err != nil {
			return err
		}
		for _, ev := range tap.evs {
			if err := emit(ev); err != nil {
				return err
			}
		}
		clear(tap.evs)
		tap.evs = tap.evs[:0]
		return nil
	})
	if err != nil {
		return operr.Errorf("catalog: watch from %d: %w", from, err)
	}
	if at := base.Index(); at != to {
		return fmt.Errorf("catalog: watch from %d: the replay reached %d, not the live index %d", from, at, to)
	}
	return nil
}
