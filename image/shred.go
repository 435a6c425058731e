package image

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/internal/operr"
)

// Removing old images at a pace.
//
// A filesystem that discards the blocks of a removed file (ext4 mounted
// with -o discard, common on cloud VMs, this project's CI machine included)
// trims them all in its next journal commit, and every fsync on the disk
// waits for that commit: removing a large image at once stalls a
// concurrent small append + fdatasync (the shape of the journal's WAL
// commit) far beyond its usual latency. So Prune renames an old image to
// image.<index>.trash (out of every listing at once) and a goroutine of the
// Store shrinks it by truncation, a step at a time at
// Config.DeleteBytesPerSec, before removing it, which keeps the stall
// short. BenchmarkPruneStall measures both.
// RocksDB's DeleteScheduler and Pebble's deletion pacing exist for the same
// reason.
//
// A file someone is reading (a peer being served the image, a checkpoint
// loading its base, a tool reading it through ReadFile or ReadHeader in
// another process: see tryFlock) is removed at once instead: its readers
// keep their bytes, which truncation would take from them. A crash leaves the .trash
// file, which the next Open shreds. Files without a descriptor (in-memory
// filesystems) are removed at once.

const trashSuffix = ".trash"

// shredStep is the size of one truncation step (see testingKnobs).
const shredStep = 8 << 20

type trashFile struct {
	name string // in the image dir
	f    vfs.File
}

// reading registers a reader of the file name (an image) until the
// returned func is called: Prune will not truncate a file being read.
func (s *Store) reading(name string) (done func()) {
	s.mu.Lock()
	s.mu.readers[name]++
	s.mu.Unlock()
	return sync.OnceFunc(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.mu.readers[name]--; s.mu.readers[name] <= 0 {
			delete(s.mu.readers, name)
		}
	})
}

// removeFiles removes image files from the image dir (each through
// discard) and syncs the directory. The caller holds dirMu.
func (s *Store) removeFiles(names ...string) error {
	var trash []*trashFile
	closeAll := func() {
		for _, t := range trash {
			t.f.Close() // the next Open shreds it
		}
	}
	for _, n := range names {
		t, err := s.discard(n)
		if err != nil {
			closeAll()
			return operr.Errorf("image: remove %s: %w", s.path(n), err)
		}
		if t != nil {
			trash = append(trash, t)
		}
	}
	if err := syncDir(s.fs, s.dir); err != nil {
		// Not shredded before the renames are durable: a crash could
		// bring back a truncated image under its own name.
		closeAll()
		return err
	}
	s.queueTrash(trash...)
	return nil
}

// discard removes the file name from the image dir, at once or, when it
// can, by renaming it to the trash for the shredder (returned, to be handed
// over once the directory is synced). The caller holds dirMu.
func (s *Store) discard(name string) (*trashFile, error) {
	path := s.path(name)
	if canTruncate && s.cfg.DeleteBytesPerSec > 0 {
		s.mu.Lock()
		t, err := s.toTrashLocked(name)
		s.mu.Unlock()
		if t != nil || err != nil {
			return t, err
		}
	}
	if err := s.fs.Remove(path); err != nil && !isNotExist(err) {
		return nil, err
	}
	return nil, nil
}

// toTrashLocked renames name to the trash if no one reads it and it has a
// file descriptor to truncate through; nil if it did not. s.mu is held, so
// that no reader opens the file between the check and the rename.
func (s *Store) toTrashLocked(name string) (*trashFile, error) {
	if s.mu.readers[name] > 0 || s.mu.closed {
		return nil, nil
	}
	f, err := s.fs.OpenReadWrite(s.path(name), vfs.WriteCategoryUnspecified)
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	if f.Fd() == vfs.InvalidFd || tryFlock(f.Fd(), true) {
		// No descriptor to truncate through, or a reader outside the
		// Store (another process) holds the file: removed at once.
		f.Close()
		return nil, nil
	}
	if err := s.fs.Rename(s.path(name), s.path(name+trashSuffix)); err != nil {
		f.Close()
		return nil, err
	}
	return &trashFile{name: name + trashSuffix, f: f}, nil
}

// queueTrash hands files to the shredder.
func (s *Store) queueTrash(ts ...*trashFile) {
	if len(ts) == 0 {
		return
	}
	s.mu.Lock()
	closed := s.mu.closed
	if !closed {
		s.mu.trash = append(s.mu.trash, ts...)
	}
	s.mu.Unlock()
	if closed {
		for _, t := range ts {
			t.f.Close() // the next Open shreds it
		}
		return
	}
	select {
	case s.trashWake <- struct{}{}:
	default:
	}
}

// queueLeftoverTrash hands the .trash files a crash or a Close left to the
// shredder (at Open). One it cannot open it tries to remove at once: it is
// garbage, no reason to refuse to start.
func (s *Store) queueLeftoverTrash() error {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return err
	}
	var ts []*trashFile
	for _, n := range names {
		if !isTrashName(n) {
			continue
		}
		f, err := s.fs.OpenReadWrite(s.path(n), vfs.WriteCategoryUnspecified)
		if err == nil && f.Fd() != vfs.InvalidFd && tryFlock(f.Fd(), true) {
			// A reader outside the Store still holds it: removed at once.
			f.Close()
			f, err = nil, errors.New("read by another process")
		}
		if err != nil {
			if rerr := s.fs.Remove(s.path(n)); rerr != nil && !isNotExist(rerr) {
				s.logger.Warn("could not remove an old image", "file", s.path(n), "err", errors.Join(err, rerr))
			}
			continue
		}
		ts = append(ts, &trashFile{name: n, f: f})
	}
	s.queueTrash(ts...)
	return nil
}

// isTrashName reports whether name is a file the Store moved to the trash:
// image.<index>.trash, image.<index>.fetched.trash or
// image.<index>.corrupt.trash (Prune discards all three kinds).
func isTrashName(name string) bool {
	rest, ok := strings.CutSuffix(name, trashSuffix)
	if !ok {
		return false
	}
	for _, suffix := range []string{"", fetchedSuffix, corruptSuffix} {
		if _, ok := parseName(rest, suffix); ok {
			return true
		}
	}
	return false
}

// shredder runs from Open to Close.
func (s *Store) shredder() {
	defer close(s.shredderDone)
	defer s.closeTrash()
	for {
		s.mu.Lock()
		var t *trashFile
		if len(s.mu.trash) > 0 {
			t = s.mu.trash[0]
			s.mu.trash = s.mu.trash[1:]
		}
		s.mu.Unlock()
		if t == nil {
			select {
			case <-s.trashWake:
				continue
			case <-s.closing.Done():
				return
			}
		}
		if !s.shred(t) {
			return
		}
	}
}

// closeTrash closes the files still queued when the Store closes: the
// next Open shreds them.
func (s *Store) closeTrash() {
	s.mu.Lock()
	ts := s.mu.trash
	s.mu.trash = nil
	s.mu.Unlock()
	for _, t := range ts {
		t.f.Close()
	}
}

// shred truncates t a step at a time, then removes it. It returns false if
// the Store closed first (the file stays, for the next Open).
func (s *Store) shred(t *trashFile) bool {
	path := s.path(t.name)
	step := int64(shredStep)
	if k := s.cfg.testingKnobs.shredStep; k > 0 {
		step = k
	}
	pause := time.Duration(float64(step) / float64(s.cfg.DeleteBytesPerSec) * float64(time.Second))
	size := int64(0)
	if st, err := t.f.Stat(); err == nil {
		size = st.Size()
	}
	for size > 0 && t.f.Fd() != vfs.InvalidFd {
		size = max(0, size-step)
		if err := truncateFd(t.f.Fd(), size); err != nil {
			s.logger.Warn("could not truncate an old image; removing it at once", "file", path, "err", err)
			break
		}
		if k := s.cfg.testingKnobs.shredded; k != nil {
			k(t.name, size)
		}
		if size == 0 {
			break
		}
		timer := time.NewTimer(pause)
		select {
		case <-timer.C:
		case <-s.closing.Done():
			timer.Stop()
			t.f.Close()
			return false
		}
	}
	// Removed before it is closed: the lock on it (tryFlock) lasts until
	// its name is gone, so a reader outside the Store that locks it after
	// finds it removed, never a truncated file under an image's name.
	if err := s.fs.Remove(path); err != nil && !isNotExist(err) {
		s.logger.Warn("could not remove an old image", "file", path, "err", err)
	}
	t.f.Close()
	if k := s.cfg.testingKnobs.shredded; k != nil {
		k(t.name, -1)
	}
	return true
}
