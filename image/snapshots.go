package image

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/metatree/metatree/internal/operr"
)

// Snapshots is the journal's hook for images, declared here as the journal
// declares it (journal.Snapshots); *Store implements it.
type Snapshots interface {
	LoadLatest(ctx context.Context, minIndex uint64) (index uint64, membership []byte, err error)
	Fetch(ctx context.Context, addr string, index uint64) error
	Install(ctx context.Context, index uint64) error
}

var _ Snapshots = (*Store)(nil)

// LoadLatest loads the newest valid image whose index is at least minIndex
// (the journal's first retained index - 1) into the live state, before raft
// starts, and returns its index and membership blob; (0, nil, nil) when
// there is no image and the journal holds every entry (minIndex 0).
//
// A newest image that fails to decode is renamed image.<index>.corrupt and
// the next older one at or above minIndex is tried, with a warning: the
// journal still covers the gap. If none is left the error names every file
// and what is wrong with it, and wraps ErrNoUsableImage: the node never
// starts silently empty.
func (s *Store) LoadLatest(ctx context.Context, minIndex uint64) (uint64, []byte, error) {
	if err := s.acquire(ctx); err != nil {
		return 0, nil, err
	}
	defer s.release()
	l, err := s.list()
	if err != nil {
		return 0, nil, err
	}
	var candidates []string
	for _, i := range l.installed {
		if i >= minIndex {
			candidates = append(candidates, imageName(i))
		}
	}
	// An image fetched from a peer becomes usable once raft recorded it as
	// its snapshot, which is exactly when the journal's log starts right
	// after it. A fetched image the journal never recorded (a crash between
	// Fetch and raft persisting the snapshot) stays unused: loading it would
	// put the state ahead of raft's commit index.
	if len(candidates) == 0 && minIndex > 0 && slices.Contains(l.fetched, minIndex) {
		if err := s.promote(minIndex); err != nil {
			return 0, nil, err
		}
		candidates = append(candidates, imageName(minIndex))
	}
	if len(candidates) == 0 {
		if minIndex == 0 {
			if len(l.corrupt) > 0 {
				s.logger.Warn("no valid image; replaying the whole journal", "quarantined", len(l.corrupt))
			}
			return 0, nil, nil
		}
		if len(l.installed) == 0 {
			return 0, nil, fmt.Errorf("%w: the journal starts after index %d but %s holds no image; restore this node from a peer", ErrNoUsableImage, minIndex, s.dir)
		}
		return 0, nil, fmt.Errorf("%w: the journal starts after index %d but the newest image in %s is %s; restore this node from a peer", ErrNoUsableImage, minIndex, s.dir, imageName(l.installed[0]))
	}
	var failures []error
	var failed []string
	// Images that fail to decode are set aside only once the node starts
	// without them; when nothing is left they stay for the operator.
	setAside := func() {
		for k, name := range failed {
			if errors.Is(failures[k], ErrCorrupt) {
				s.quarantine(name, failures[k])
			}
		}
	}
	for _, name := range candidates {
		if err := ctx.Err(); err != nil {
			return 0, nil, context.Cause(ctx)
		}
		info, err := s.loadInto(s.cfg.State, name, true)
		if err == nil {
			if len(failures) > 0 {
				s.logger.Warn("fell back to an older image; the journal covers the gap", "image", s.path(name), "skipped", errors.Join(failures...))
				setAside()
			} else {
				s.logger.Info("loaded image", "image", s.path(name), "index", info.Index, "bytes", info.Size)
			}
			return info.Index, info.Membership, nil
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownVersion) {
			// Wrong cluster, I/O error: no fallback hides it.
			return 0, nil, err
		}
		failures = append(failures, err)
		failed = append(failed, name)
	}
	if minIndex == 0 {
		s.logger.Warn("every image is unusable; replaying the whole journal from its first entry", "err", errors.Join(failures...))
		setAside()
		return 0, nil, nil
	}
	return 0, nil, fmt.Errorf("%w: every image at or after index %d is unusable and the journal starts after it: %w", ErrNoUsableImage, minIndex, errors.Join(failures...))
}

// promote renames a fetched image to its final name.
func (s *Store) promote(index uint64) error {
	return s.renameDurably(s.path(imageName(index)+fetchedSuffix), s.path(imageName(index)))
}

// Install loads the durable local image at index (made so by Fetch) into the
// live state, atomically: the whole file is verified before the state sees
// it, and State.Load swaps the content. When State is a Stager, Fetch
// decoded the image while it downloaded, and Install only swaps it in. It runs under the data dir's restore
// lock, never beside a restore or another load.
func (s *Store) Install(ctx context.Context, index uint64) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	name := imageName(index)
	if _, err := s.fs.Stat(s.path(name)); err != nil {
		if !isNotExist(err) {
			return operr.Errorf("image: stat %s: %w", s.path(name), err)
		}
		if _, ferr := s.fs.Stat(s.path(name + fetchedSuffix)); ferr != nil {
			return operr.Errorf("image: install index %d: no %s in %s: %w", index, name, s.dir, ErrNotFound)
		}
		if err := s.promote(index); err != nil {
			return err
		}
	}
	s.mu.Lock()
	st := s.mu.staged
	s.mu.staged = nil
	s.mu.Unlock()
	var info Info
	var err error
	if st != nil && st.index == index {
		// Decoded from the very bytes that were verified and made
		// durable: no need to read the file again.
		if info, err = s.readHeader(name); err != nil {
			return operr.Errorf("image: install: %w", err)
		}
		st.commit()
	} else if info, err = s.loadInto(s.cfg.State, name, true); err != nil {
		return operr.Errorf("image: install: %w", err)
	}
	s.unpin(index) // older fetched images raft never applied go too
	s.restores.Add(1)
	s.logger.Info("installed image", "image", s.path(name), "index", info.Index, "bytes", info.Size)
	if err := s.Prune(); err != nil {
		s.logger.Warn("prune after install failed", "err", err)
	}
	return nil
}
