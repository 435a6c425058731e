package frontendtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/metatree/metatree/internal/durable"
	"github.com/metatree/metatree/journal/journaltest"
)

// ErrNotInMemory is Crash's error on a cluster whose frontends run on the
// real disk (Options.InMemory unset).
var ErrNotInMemory = errors.New("frontendtest: a power cut needs Options.InMemory")

// memDir is frontend i's data dir on its in-memory filesystem.
func memDir(i int) string { return fmt.Sprintf("/frontend-%d", i) }

// memFS returns frontend i's in-memory filesystem, creating it, with the
// data dir made durably as an installer would, on first use.
func (c *Cluster) memFS(i int) (*journaltest.CrashFS, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fs, ok := c.fss[i]; ok {
		return fs, nil
	}
	fs := journaltest.NewCrashFS()
	if c.opts.DiskFree > 0 {
		fs.SetFree(c.opts.DiskFree)
	}
	if err := durable.MkdirAll(fs, memDir(i)); err != nil {
		return nil, fmt.Errorf("frontendtest: data dir of frontend %d: %w", i, err)
	}
	c.fss[i] = fs
	return fs, nil
}

// FS is frontend i's in-memory filesystem (Options.InMemory), or nil.
func (c *Cluster) FS(i int) *journaltest.CrashFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fss[i]
}

// Crash cuts frontend i's power: it drops off the network at once (so it
// acknowledges nothing the cut does not keep), its filesystem keeps only
// what was synced, and the process is then closed on the disk nobody sees
// again. RestartFrontend starts it from what the cut kept, on a disk as
// slow and as full as before (journaltest.CrashFS.SetSyncDelay, SetFree,
// SetFull). It needs Options.InMemory (ErrNotInMemory).
func (c *Cluster) Crash(i int) error {
	fs := c.FS(i)
	if fs == nil {
		return fmt.Errorf("crash frontend %d: %w", i, ErrNotInMemory)
	}
	c.mu.Lock()
	f := c.fes[i]
	delete(c.fes, i)
	c.mu.Unlock()
	c.net.SetDown(Addr(i), true)
	kept := fs.CutNow()
	next := journaltest.WrapCrashFS(kept)
	next.SetSyncDelay(fs.SyncDelay()) // the disk is as slow, and as full, after the cut
	next.SetFree(fs.Free())
	next.SetFull(fs.Full())
	c.mu.Lock()
	c.fss[i] = next
	c.mu.Unlock()
	if f != nil {
		_ = f.Close() // on the old filesystem, off the network
	}
	c.net.SetDown(Addr(i), false)
	return nil
}

// ShutdownFrontend stops frontend i gracefully (frontend.Shutdown: a
// leader hands its leadership off first), keeping its data dir.
func (c *Cluster) ShutdownFrontend(ctx context.Context, i int) error {
	c.mu.Lock()
	f := c.fes[i]
	delete(c.fes, i)
	c.mu.Unlock()
	if f == nil {
		return nil
	}
	return f.Shutdown(ctx)
}
