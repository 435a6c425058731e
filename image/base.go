package image

import (
	"context"
	"errors"

	"github.com/metatree/metatree/internal/operr"
)

// LoadAtOrBefore loads the newest image whose index is at most index into
// st, a fresh state that the caller discards on error, and returns the
// image's Info. An image that fails to decode, or that Prune removed
// meanwhile, is passed over for an older one. With no image old enough it
// returns Info{} and nil: st stays empty, the state at index 0; when the
// only ones old enough are unusable, an error that names them. It is how a
// watch resumed from a past index gets a state to replay the log on.
func (s *Store) LoadAtOrBefore(ctx context.Context, st State, index uint64) (Info, error) {
	l, err := s.list()
	if err != nil {
		return Info{}, err
	}
	var failures []error
	for _, i := range l.installed {
		if i > index {
			continue
		}
		if err := ctx.Err(); err != nil {
			return Info{}, context.Cause(ctx)
		}
		info, err := s.loadInto(st, imageName(i), false)
		if err == nil {
			return info, nil
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownVersion) && !errors.Is(err, ErrNotFound) {
			return Info{}, operr.Errorf("image: load the newest image at or before %d: %w", index, err)
		}
		failures = append(failures, err)
	}
	if len(failures) > 0 {
		// st may hold a body whose checksum failed: it is not the empty
		// state.
		return Info{}, operr.Errorf("image: no usable image at or before %d: %w", index, errors.Join(failures...))
	}
	return Info{}, nil
}
