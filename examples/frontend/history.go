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
