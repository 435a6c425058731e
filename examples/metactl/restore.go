package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/metatree/metatree/internal/durable"
	"io"
	"net"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
)

// restoreConfig is what `metactl restore` is asked to do.
type restoreConfig struct {
	Image string // the image file
	Dir   string // the data dir to create
	ID    uint64
	Addr  string
	Token string
}

// restoreJSON is `restore`'s output.
type restoreJSON struct {
	Dir       string `json:"dir"`
	ClusterID string `json:"cluster_id"`
	ID        uint64 `json:"id"`
	Addr      string `json:"addr"`
	Index     uint64 `json:"index"`
	Term      uint64 `json:"term"`
	Bytes     int64  `json:"bytes"`
}

// restore makes a data dir from which `metaserver -id N -dir DIR -addr A`
// starts as the only voter of a new cluster holding the image's catalog.
func restore(ctx context.Context, args []string, e env) error {
	fl := flag.NewFlagSet("restore", flag.ContinueOnError)
	var c restoreConfig
	fl.StringVar(&c.Image, "image", "", "the image file (a backup, or image.<index> of a data dir)")
	fl.StringVar(&c.Dir, "dir", "", "the data dir to create: it must not exist or be empty")
	fl.Uint64Var(&c.ID, "id", 0, "the new cluster's first node (the -id metaserver is started with)")
	fl.StringVar(&c.Addr, "addr", "", "that node's HOST:PORT (the -addr metaserver is started with)")
	fl.StringVar(&c.Token, "token", "", "the new cluster's join token (default: none)")
	if _, err := parse(fl, args, 0, "no positional argument"); err != nil {
		return err
	}
	switch {
	case c.Image == "" || c.Dir == "" || c.Addr == "":
		return usageErr("restore needs -image, -dir, -id and -addr")
	case c.ID == 0:
		return usageErr("restore: -id must be a positive integer")
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return usageErr("restore: -addr %q: want HOST:PORT", c.Addr)
	}
	out, err := restoreDir(ctx, e.fs, c, e.stderr)
	if err != nil {
		return err
	}
	return writeJSON(e.stdout, out)
}

// restoreDir builds the new data dir aside (DIR.restoring), then renames it
// into place and syncs the parent directory: a crash at any step leaves
// DIR as it was (absent or empty, with a leftover DIR.restoring that the
// next restore replaces) or the whole new dir, never a dir that will not
// open. The image is copied with a new header (the new cluster id, the
// membership naming the node alone) and its body verified on the way
// against the source's checksum.
func restoreDir(ctx context.Context, fs vfs.FS, c restoreConfig, stderr io.Writer) (restoreJSON, error) {
	if err := checkEmptyOrAbsent(fs, c.Dir); err != nil {
		return restoreJSON{}, err
	}
	hdr, err := image.ReadHeader(fs, c.Image)
	if err != nil {
		return restoreJSON{}, fmt.Errorf("restore: %w", err)
	}
	if hdr.Index == 0 {
		return restoreJSON{}, fmt.Errorf("restore: %s is an image of index 0: nothing to restore", c.Image)
	}
	tmp := c.Dir + ".restoring"
	if _, err := fs.Stat(tmp); err == nil {
		fmt.Fprintf(stderr, "metactl: removing %s, left by an interrupted restore\n", tmp)
		if err := fs.RemoveAll(tmp); err != nil {
			return restoreJSON{}, fmt.Errorf("restore: remove %s: %w", tmp, err)
		}
	}
	clusterID := uuid.NewString()
	blob, err := journal.NewClusterMembership(hdr.Membership, hdr.Index, c.ID, c.Addr)
	if err != nil {
		return restoreJSON{}, fmt.Errorf("restore: %s: %w", c.Image, err)
	}
	written, err := copyImage(ctx, fs, c.Image, tmp, image.Header{ClusterID: clusterID, Index: hdr.Index, Term: hdr.Term, Membership: blob})
	if err != nil {
		return restoreJSON{}, errors.Join(err, removeTmp(fs, tmp))
	}
	if err := journal.Seed(journal.SeedConfig{
		FS: fs, Dir: tmp, ID: c.ID, Addr: c.Addr, ClusterID: clusterID, Token: c.Token,
		Index: hdr.Index, Term: hdr.Term, Membership: blob,
	}); err != nil {
		return restoreJSON{}, errors.Join(fmt.Errorf("restore: %w", err), removeTmp(fs, tmp))
	}
	if err := fs.Rename(tmp, c.Dir); err != nil {
		return restoreJSON{}, fmt.Errorf("restore: rename %s to %s: %w", tmp, c.Dir, err)
	}
	if err := durable.SyncDir(fs, fs.PathDir(c.Dir)); err != nil {
		return restoreJSON{}, fmt.Errorf("restore: %w", err)
	}
	return restoreJSON{Dir: c.Dir, ClusterID: clusterID, ID: c.ID, Addr: c.Addr, Index: hdr.Index, Term: hdr.Term, Bytes: written}, nil
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
		return fmt.Errorf("restore: -dir %s is a file", dir)
	}
	names, err := fs.List(dir)
	if err != nil {
		return fmt.Errorf("restore: list %s: %w", dir, err)
	}
	if len(names) > 0 {
		return fmt.Errorf("restore: -dir %s is not empty (%d entries): restore makes a new data dir", dir, len(names))
	}
	return nil
}

func removeTmp(fs vfs.FS, tmp string) error {
	if err := fs.RemoveAll(tmp); err != nil {
		return fmt.Errorf("restore: remove %s: %w", tmp, err)
	}
	return nil
}
