package frontend

import (
	"context"
	"errors"
	"fmt"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
)

// History is where a resumed watch (catalog.Tree.WatchFrom) finds what it
// missed: this frontend's images and the journal's retained log. A resume
// older than the log fails with catalog.ErrCompacted.
func (f *Frontend) History() catalog.History {
	compacted := func(err error) error {
		if errors.Is(err, journal.ErrCompacted) {
			return fmt.Errorf("%w: %w", catalog.ErrCompacted, err)
		}
		return err
	}
	return catalog.History{
		Base: func(ctx context.Context, at uint64) (*catalog.Tree, uint64, error) {
			// A follower installing an image from a peer makes the
			// snapshot durable (the log starts after its index) before
			// image.Store.Install renames image.N.fetched to image.N, and
			// the journal counts N applied only once Install returned
			// (journal/apply.go). Waiting until min(at, FirstIndex()-1) is
			// applied keeps a resume out of that window, so the image the
			// log starts after is in place. Accepting the fetched file
			// instead would load an image Install has not verified and a
			// prune may remove; the wait relies on the journal's order
			// alone. A concurrent prune and compaction past the image
			// chosen below still ends in ErrCompacted (the TermAt check),
			// and after a crash in the window the restart promotes the
			// fetched image (LoadLatest) before the journal applies
			// anything, so the wait returns at once.
			first, err := f.journal.FirstIndex()
			if err != nil {
				return nil, 0, err
			}
			if err := f.journal.WaitApplied(ctx, min(at, first-1)); err != nil {
				return nil, 0, err
			}
			// Refuse before loading an image whose log is gone.
			var base uint64
			idx, err := f.images.Indexes()
			if err != nil {
				return nil, 0, err
			}
			for _, i := range idx {
				if i <= at {
					base = i
					break
				}
			}
			if _, err := f.journal.TermAt(base); err != nil {
				return nil, 0, compacted(err)
			}
			t := f.NewTree()
			info, err := f.images.LoadAtOrBefore(ctx, t, at)
			if err != nil {
				return nil, 0, err
			}
			// The replay goes on from the image's index, which the log
			// starts after: the tree's own index can be older.
			return t, info.Index, nil
		},
		Entries: func(ctx context.Context, after, upTo uint64, fn func(uint64, []byte) error) error {
			// The catalog applies an entry before the journal counts it
			// applied.
			if err := f.journal.WaitApplied(ctx, upTo); err != nil {
				return err
			}
			return compacted(f.journal.ReadEntries(ctx, after, upTo, fn))
		},
	}
}
