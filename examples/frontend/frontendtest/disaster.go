package frontendtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/internal/durable"
	"github.com/metatree/metatree/journal"
)

// OperatorAddr is the address an operator's tools (Backup) dial from.
const OperatorAddr = "operator:9000"

// ForceNewCluster restarts frontend i from its data dir with
// Config.ForceNewCluster, as `metaserver -force-new-cluster` does once the
// other voters are lost for good: the journal rewrites the membership of
// its log to i alone (journal's force path), commits its log's tail, and
// i elects itself. i stops first if it runs. A later RestartFrontend is an
// ordinary restart. A data dir that is not a voter's fails the start.
func (c *Cluster) ForceNewCluster(ctx context.Context, i int) (*frontend.Frontend, error) {
	if i <= 0 {
		return nil, fmt.Errorf("%w: id %d: want a positive frontend id", ErrInvalidFrontend, i)
	}
	c.StopFrontend(i)
	f, err := c.startWith(ctx, i, false, "", func(cfg *frontend.Config) { cfg.ForceNewCluster = true })
	if err != nil {
		return nil, fmt.Errorf("frontendtest: force a new cluster from frontend %d: %w", i, err)
	}
	return f, nil
}

// Backup downloads the newest image of running frontend from into out on
// fs, as `metactl backup -from` does (image.Backup: verified, written
// atomically), over the cluster's network from OperatorAddr with the
// cluster's token, and returns the image's header.
func (c *Cluster) Backup(ctx context.Context, from int, fs vfs.FS, out string) (image.Info, error) {
	if c.Frontend(from) == nil {
		return image.Info{}, fmt.Errorf("%w: frontend %d does not run", ErrInvalidFrontend, from)
	}
	tr := c.net.Transport(OperatorAddr)
	defer tr.CloseIdleConnections()
	token := c.opts.Config.Token
	info, err := image.Backup(ctx, image.BackupConfig{
		Addr: Addr(from), Out: out, FS: fs, Token: token,
		HTTPClient: &http.Client{Transport: tr},
		Header:     http.Header{"Authorization": {"Bearer " + token}},
	})
	if err != nil {
		return image.Info{}, fmt.Errorf("frontendtest: back up frontend %d: %w", from, err)
	}
	return info, nil
}

// Restore makes frontend i the only voter of a new cluster that holds the
// catalog of the image file src on fs, as an operator does with `metactl
// restore -image -dir -id -addr` and a metaserver started on that dir:
// i's data dir is dropped, the image copied onto i's filesystem and
// restored into a new data dir (frontend.Restore: a new cluster id, a
// membership of i alone), and i starts from it. i must be neither a
// worker's id nor a running frontend's (ErrInvalidFrontend). The new
// cluster's id is in the frontend's journal status.
func (c *Cluster) Restore(ctx context.Context, i int, fs vfs.FS, src string) (*frontend.Frontend, error) {
	c.mu.Lock()
	_, running := c.fes[i]
	_, worker := c.workers[uint64(i)]
	c.mu.Unlock()
	if i <= 0 || running || worker {
		return nil, fmt.Errorf("%w: id %d: want a positive id that is neither a worker's nor a running frontend's", ErrInvalidFrontend, i)
	}
	if err := c.wipe(i); err != nil {
		return nil, err
	}
	dfs, dir, err := c.dataDir(i)
	if err != nil {
		return nil, err
	}
	// The operator copies the backup onto the host, then restores into an
	// absent data dir.
	copied := fmt.Sprintf("%s.image", dir)
	if err := copyFile(fs, src, dfs, copied); err != nil {
		return nil, fmt.Errorf("frontendtest: restore: %w", err)
	}
	if err := dfs.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("frontendtest: restore: %w", err)
	}
	_, err = frontend.Restore(ctx, frontend.RestoreConfig{FS: dfs, Image: copied, Dir: dir, ID: uint64(i), Addr: Addr(i), Token: c.opts.Config.Token})
	if err = errors.Join(err, dfs.Remove(copied)); err != nil {
		return nil, fmt.Errorf("frontendtest: restore frontend %d: %w", i, err)
	}
	c.mu.Lock()
	c.joined[i] = journal.Follower // a voter, whatever its id
	c.mu.Unlock()
	f, err := c.start(ctx, i, false, "")
	if err != nil {
		return nil, fmt.Errorf("frontendtest: start restored frontend %d: %w", i, err)
	}
	return f, nil
}

// dataDir returns frontend i's filesystem and data dir, made if missing.
func (c *Cluster) dataDir(i int) (vfs.FS, string, error) {
	if c.opts.InMemory {
		fs, err := c.memFS(i)
		if err != nil {
			return nil, "", err
		}
		return fs, memDir(i), nil
	}
	dir := filepath.Join(c.root, fmt.Sprint(i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("frontendtest: data dir of frontend %d: %w", i, err)
	}
	return vfs.Default, dir, nil
}

// copyFile copies src on from to dst on to, synced.
func copyFile(from vfs.FS, src string, to vfs.FS, dst string) error {
	in, err := from.Open(src)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	out, err := to.Create(dst, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		return errors.Join(fmt.Errorf("copy %s to %s: %w", src, dst, err), out.Close())
	}
	if err := out.Sync(); err != nil {
		return errors.Join(fmt.Errorf("sync %s: %w", dst, err), out.Close())
	}
	if err := out.Close(); err != nil {
		return err
	}
	return durable.SyncDir(to, to.PathDir(dst))
}
