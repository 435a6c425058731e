package diskguard

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/internal/durable"
	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/errs"
)

// BallastName is the emergency ballast file in the data dir.
const BallastName = "EMERGENCY_BALLAST"

// Guard watches the free space of the data dir's filesystem so that
// the node refuses new writes (ErrNoSpace) while there is still room for
// what raft itself must write: the entries already proposed, the leader's
// timestamps, membership changes, the appends a follower receives, and the
// checkpoints that let the log be compacted. A Pebble WAL that meets
// ENOSPC halts the node (ErrHalted); the guard keeps it from getting there.
//
// It keeps an emergency ballast file, as CockroachDB does: space reserved
// while the disk has room and released when free space falls under half
// the reserve, so that the node can still commit raft's own writes, or an
// operator can remove it (the file can be deleted by hand at any time) to
// restart a node whose disk filled. It is written again once free space is
// back above the reserve plus the ballast.
//
// A Guard is safe for concurrent use; Check runs on the journal's
// watchSpace goroutine (and in tests), Refuse and Low on every proposer.
type Guard struct {
	fs      vfs.FS
	dir     string
	ballast string
	reserve uint64 // free bytes under which writes are refused
	size    uint64 // ballast bytes; 0: no ballast
	log     *slog.Logger

	low   atomic.Bool
	avail atomic.Uint64
	off   atomic.Bool // the filesystem reports no usage: no guard
}

// New returns the guard of data dir dir on fs: writes are refused under
// reserve free bytes (0 or less: never; the guard is off), and a ballast
// of ballast bytes (0 or less: none) is kept in dir. It measures nothing
// until the first Check.
func New(fs vfs.FS, dir string, reserve, ballast int64, log *slog.Logger) *Guard {
	g := &Guard{fs: fs, dir: dir, ballast: filepath.Join(dir, BallastName), log: log}
	if reserve <= 0 {
		g.off.Store(true)
		return g
	}
	g.reserve = uint64(reserve)
	if ballast > 0 {
		g.size = uint64(ballast)
	}
	return g
}

// Refuse returns an error wrapping ErrNoSpace while free space is under
// the reserve, and nil otherwise.
func (g *Guard) Refuse() error {
	if !g.low.Load() {
		return nil
	}
	return fmt.Errorf("%w: %d bytes free under %s, below the reserve of %d (Config.ReserveBytes): writes resume once there is room",
		errs.ErrNoSpace, g.avail.Load(), g.dir, g.reserve)
}

// Alarm returns an error wrapping ErrNoSpace, naming the first of voters
// whose no-space alarm is raised (raised reports it), and nil when none
// is: a cluster refuses writes while a voter's disk is nearly full.
func Alarm(voters []uint64, raised func(id uint64) bool) error {
	for _, id := range voters {
		if raised(id) {
			return fmt.Errorf("%w: member %d's disk is nearly full (its no-space alarm is raised); the cluster takes writes again once it frees space",
				errs.ErrNoSpace, id)
		}
	}
	return nil
}

// Low reports whether free space was under the reserve at the last check.
func (g *Guard) Low() bool { return g.low.Load() }

// Free returns the free bytes at the last check; ok is false while the
// guard is off (no reserve, or a filesystem without usage) or nil.
func (g *Guard) Free() (bytes uint64, ok bool) {
	if g == nil || g.off.Load() {
		return 0, false
	}
	return g.avail.Load(), true
}

// Check measures free space, sets or clears the refusal, and releases or
// restores the ballast. A filesystem that cannot report its usage (an
// in-memory one) turns the guard off.
func (g *Guard) Check() error {
	if g.off.Load() {
		return nil
	}
	u, err := g.fs.GetDiskUsage(g.dir)
	if errors.Is(err, vfs.ErrUnsupported) {
		g.off.Store(true)
		return nil
	}
	if err != nil {
		return operr.Errorf("journal: disk usage of %s: %w", g.dir, err)
	}
	avail := u.AvailBytes
	if avail < g.reserve/2 && g.hasBallast() {
		if err := g.fs.Remove(g.ballast); err != nil {
			g.log.Error("could not release the emergency ballast", "file", g.ballast, "err", err)
		} else {
			g.log.Warn("released the emergency ballast: the disk is nearly full", "file", g.ballast, "free", avail, "reserve", g.reserve)
			if u, err = g.fs.GetDiskUsage(g.dir); err == nil {
				avail = u.AvailBytes
			}
		}
	}
	g.avail.Store(avail)
	if low := avail < g.reserve; low != g.low.Swap(low) {
		if low {
			g.log.Error("refusing writes: the disk is nearly full", "dir", g.dir, "free", avail, "reserve", g.reserve)
		} else {
			g.log.Info("taking writes again: free space is back above the reserve", "dir", g.dir, "free", avail, "reserve", g.reserve)
		}
	}
	if g.size > 0 && avail >= g.reserve+2*g.size && !g.hasBallast() {
		if err := g.writeBallast(); err != nil {
			g.log.Warn("could not write the emergency ballast", "file", g.ballast, "err", err)
		}
	}
	return nil
}

func (g *Guard) hasBallast() bool {
	_, err := g.fs.Stat(g.ballast)
	return err == nil
}

// writeBallast writes the ballast file (allocated, not sparse, so that its
// space is really held) under a temporary name and renames it into place,
// so a crash never leaves a short ballast under the real name.
func (g *Guard) writeBallast() (err error) {
	tmp := g.ballast + ".tmp"
	f, err := g.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = g.fs.Remove(tmp)
		}
	}()
	if err := fill(f, g.size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := g.fs.Rename(tmp, g.ballast); err != nil {
		return err
	}
	return durable.SyncDir(g.fs, g.dir)
}

// fill allocates size bytes in f: preallocated blocks where the
// filesystem supports it (the file's length stays 0 there, its blocks are
// held), zeros written through otherwise.
func fill(f vfs.File, size uint64) error {
	if err := f.Preallocate(0, int64(size)); err == nil {
		return nil
	}
	zeros := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := min(left, uint64(len(zeros)))
		if _, err := f.Write(zeros[:n]); err != nil {
			return err
		}
		left -= n
	}
	return nil
}
