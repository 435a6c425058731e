package frontend

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/internal/durable"
	"github.com/metatree/metatree/journal/offline"
)

// RestoreConfig names a backup and the data dir Restore makes from it.
type RestoreConfig struct {
	// FS holds Image and Dir (nil: the operating system's).
	FS vfs.FS
	// Image is the image file: a backup, or image.<index> of a data dir.
	Image string
	// Dir is the data dir to make; it must be absent or empty.
	Dir string
	// ID and Addr are the new cluster's first node, as it is started
	// (Config.ID, Config.Addr).
	ID   uint64
	Addr string
	// Token is the new cluster's join token ("" for none).
	Token string
}

// Restored describes the data dir Restore made.
type Restored struct {
	ClusterID string // the new cluster's id
	Index     uint64 // the image's index, the new log's first
	Term      uint64
	Bytes     int64 // the image bytes written
	// Leftover is the directory an interrupted restore left, which
	// Restore removed ("" if there was none).
	Leftover string
}

// Restore makes a data dir from which a frontend started with c.ID, c.Dir
// and c.Addr runs as the only voter of a new cluster (a new cluster id)
// holding the catalog of the image c.Image: what `metactl restore` does.
// It builds the dir aside (Dir.restoring), then renames it into place and
// syncs the parent directory, so that a crash at any step leaves Dir as it
// was (absent or empty, with a leftover Dir.restoring that the next
// Restore replaces) or the whole new dir, never a dir that will not open.
// The image is copied with a new header (the new cluster id, a membership
// naming the node alone) and its body verified on the way against the
// source's checksum.
func Restore(ctx context.Context, c RestoreConfig) (Restored, error) {
	fs := c.FS
	if fs == nil {
		fs = vfs.Default
	}
	if c.ID == 0 || c.Addr == "" || c.Image == "" || c.Dir == "" {
		return Restored{}, fmt.Errorf("%w: restore needs an image, a dir, an id and an address", ErrInvalidConfig)
	}
	if err := checkEmptyOrAbsent(fs, c.Dir); err != nil {
		return Restored{}, err
	}
	hdr, err := image.ReadHeader(fs, c.Image)
	if err != nil {
		return Restored{}, fmt.Errorf("restore: %w", err)
	}
	if hdr.Index == 0 {
		return Restored{}, fmt.Errorf("restore: %s is an image of index 0: nothing to restore", c.Image)
	}
	var out Restored
	tmp := c.Dir + ".restoring"
	if _, err := fs.Stat(tmp); err == nil {
		if err := fs.RemoveAll(tmp); err != nil {
			return Restored{}, fmt.Errorf("restore: remove %s, left by an interrupted restore: %w", tmp, err)
		}
		out.Leftover = tmp
	}
	clusterID := uuid.NewString()
	blob, err := offline.NewClusterMembership(hdr.Membership, hdr.ClusterID, hdr.Index, c.ID, c.Addr)
	if err != nil {
		return Restored{}, fmt.Errorf("restore: %s: %w", c.Image, err)
	}
	written, err := copyImage(ctx, fs, c.Image, tmp, image.Header{ClusterID: clusterID, Index: hdr.Index, Term: hdr.Term, Membership: blob})
	if err != nil {
		return Restored{}, errors.Join(err, removeTmp(fs, tmp))
	}
	if err := offline.Seed(offline.SeedConfig{
		FS: fs, Dir: tmp, ID: c.ID, Addr: c.Addr, ClusterID: clusterID, Token: c.Token,
		Index: hdr.Index, Term: hdr.Term, Membership: blob,
	}); err != nil {
		return Restored{}, errors.Join(fmt.Errorf("restore: %w", err), removeTmp(fs, tmp))
	}
	if err := fs.Rename(tmp, c.Dir); err != nil {
		return Restored{}, fmt.Errorf("restore: rename %s to %s: %w", tmp, c.Dir, err)
	}
	if err := durable.SyncDir(fs, fs.PathDir(c.Dir)); err != nil {
		return Restored{}, fmt.Errorf("restore: %w", err)
	}
	out.ClusterID, out.Index, out.Term, out.Bytes = clusterID, hdr.Index, hdr.Term, written
	return out, nil
}

// copyImage writes the image of dir's image directory: h over the body of
// the image file src, which is checked whole as it is copied.
func copyImage(ctx context.Context, fs vfs.FS, src, dir string, h image.Header) (int64, error) {
	store, err := image.Open(image.Config{Dir: dir, FS: fs, State: catalog.New(), ClusterID: h.ClusterID})
	if err != nil {
		return 0, fmt.Errorf("restore: %w", err)
	}
	info, err := store.Rewrite(ctx, src, h)
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("restore: copy %s: %w", src, err)
	}
	return info.Size, nil
}

// checkEmptyOrAbsent refuses a dir that holds anything.
func checkEmptyOrAbsent(fs vfs.FS, dir string) error {
	st, err := fs.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("restore: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("restore: dir %s is a file", dir)
	}
	names, err := fs.List(dir)
	if err != nil {
		return fmt.Errorf("restore: list %s: %w", dir, err)
	}
	if len(names) > 0 {
		return fmt.Errorf("restore: dir %s is not empty (%d entries): restore makes a new data dir", dir, len(names))
	}
	return nil
}

func removeTmp(fs vfs.FS, tmp string) error {
	if err := fs.RemoveAll(tmp); err != nil {
		return fmt.Errorf("restore: remove %s: %w", tmp, err)
	}
	return nil
}
