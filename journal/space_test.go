package journal

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/tmpfs"
)

// TestLowDiskRefusesWritesAndRecovers: with free space under the reserve
// the node refuses writes with ErrNoSpace (507 no_space) and releases its
// ballast once under half the reserve, though it stays up; once space is
// back it takes writes again by itself and restores the ballast.
func TestLowDiskRefusesWritesAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t)
		n := c.listen(1)
		mem := vfs.NewMem()
		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
		require.NoError(t, c.open(n, func(cfg *Config) {
			cfg.Bootstrap = true
			cfg.FS = mem
			cfg.ReserveBytes = 64 << 20
			cfg.SpaceCheckInterval = time.Hour // the test runs the checks
		}))
		c.waitLeader(1)
		propose(t, n, "a")
		ballast := filepath.Join(n.dir, ballastName)
		_, err := mem.Stat(ballast)
		require.NoError(t, err, "the ballast is written while the disk has room")

		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 48 << 20, TotalBytes: 2 << 30})
		require.NoError(t, n.j.space.check())
		_, _, err = n.j.Propose(ctxT(t, 5*time.Second), []byte("b"))
		require.ErrorIs(t, err, ErrNoSpace)
		require.ErrorContains(t, err, "reserve of 67108864")
		rec := httptest.NewRecorder()
		writeError(rec, err)
		require.Equal(t, http.StatusInsufficientStorage, rec.Code)
		require.Contains(t, rec.Body.String(), `"no_space"`)
		_, err = mem.Stat(ballast)
		require.NoError(t, err, "the ballast is kept above half the reserve")

		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 16 << 20, TotalBytes: 2 << 30})
		require.NoError(t, n.j.space.check())
		_, err = mem.Stat(ballast)
		require.True(t, os.IsNotExist(err), "the ballast is released under half the reserve: %v", err)
		require.NoError(t, n.j.Status().Err, "a full disk does not stop the node")
		require.NoError(t, n.j.ReadBarrier(ctxT(t, 5*time.Second)))

		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
		require.NoError(t, n.j.space.check())
		propose(t, n, "c")
		require.False(t, n.sm.has("b"))
		_, err = mem.Stat(ballast)
		require.NoError(t, err, "the ballast is restored once space is back")
	})
}

// TestFullDiskOnARealFilesystem fills a small tmpfs holding the data dir:
// the node refuses writes before the WAL meets ENOSPC and stays up; once
// the filler is removed it takes writes by itself, and the data dir
// reopens with every acknowledged write.
func TestFullDiskOnARealFilesystem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mnt := tmpfs.Mount(t, 48<<20)
		c := newCluster(t)
		n := c.listen(1)
		n.dir = filepath.Join(mnt, "data")
		cfgFn := func(cfg *Config) {
			cfg.ReserveBytes = 8 << 20
			cfg.BallastBytes = 2 << 20
			cfg.SpaceCheckInterval = time.Hour // the test runs the checks
		}
		require.NoError(t, c.open(n, func(cfg *Config) { cfg.Bootstrap = true; cfgFn(cfg) }))
		c.waitLeader(1)
		propose(t, n, "a")

		filler := filepath.Join(mnt, "filler")
		tmpfs.Fill(t, filler)
		require.NoError(t, n.j.space.check())
		_, err := os.Stat(filepath.Join(n.dir, ballastName))
		require.True(t, os.IsNotExist(err), "a full disk releases the ballast: %v", err)
		_, _, err = n.j.Propose(ctxT(t, 5*time.Second), []byte("b"))
		require.ErrorIs(t, err, ErrNoSpace)
		require.NoError(t, n.j.Status().Err, "the node is up, not halted")

		require.NoError(t, os.Remove(filler))
		require.NoError(t, n.j.space.check())
		propose(t, n, "c")

		n.closeJournal()
		n.sm = newMemSM()
		require.NoError(t, c.open(n, cfgFn))
		require.NoError(t, n.j.ReadBarrier(ctxT(t, 5*time.Second)))
		require.True(t, n.sm.has("a") && n.sm.has("c"), "acknowledged writes survive: %v", n.sm.values())
		require.False(t, n.sm.has("b"))
	})
}

// TestWALMeetsENOSPCOnARealFilesystem: with the guard off, a write that
// meets a full disk in Pebble's WAL halts the node (no panic, no exit),
// and once space is freed the restarted node opens with every
// acknowledged write and takes writes again.
func TestWALMeetsENOSPCOnARealFilesystem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mnt := tmpfs.Mount(t, 48<<20)
		c := newCluster(t)
		n := c.listen(1)
		n.dir = filepath.Join(mnt, "data")
		noGuard := func(cfg *Config) { cfg.ReserveBytes = -1 }
		require.NoError(t, c.open(n, func(cfg *Config) { cfg.Bootstrap = true; noGuard(cfg) }))
		c.waitLeader(1)
		propose(t, n, "a")

		filler := filepath.Join(mnt, "filler")
		tmpfs.Fill(t, filler)
		var err error
		for i := 0; err == nil && i < 1000; i++ {
			// Pebble preallocates its WAL: the first writes may still fit.
			_, _, err = n.j.Propose(ctxT(t, 5*time.Second), make([]byte, 64<<10))
		}
		require.ErrorIs(t, err, ErrHalted)
		require.ErrorIs(t, err, syscall.ENOSPC)
		require.ErrorIs(t, n.j.Status().Err, ErrHalted)

		j := n.j
		n.j = nil
		_ = j.Close() // may repeat the failure; it must return
		require.NoError(t, os.Remove(filler))
		n.sm = newMemSM()
		require.NoError(t, c.open(n, noGuard))
		require.NoError(t, n.j.ReadBarrier(ctxT(t, 5*time.Second)))
		require.True(t, n.sm.has("a"), "acknowledged writes survive")
		propose(t, n, "c")
	})
}

// TestStartsOnADiskUnderTheReserve: a node bootstrapped on a filesystem
// with less free space than the default reserve (32 MiB free, 64 MiB
// reserved; less than Pebble preallocates for a WAL) starts, leads and
// refuses writes with ErrNoSpace naming the free space and the reserve;
// once the filesystem has room it takes writes.
func TestStartsOnADiskUnderTheReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mnt := tmpfs.Mount(t, 32<<20)
		c := newCluster(t)
		n := c.listen(1)
		n.dir = filepath.Join(mnt, "data")
		require.NoError(t, c.open(n, func(cfg *Config) {
			cfg.Bootstrap = true
			cfg.SpaceCheckInterval = time.Hour // the test runs the checks
		}))
		c.waitLeader(1)
		_, _, err := n.j.Propose(ctxT(t, 5*time.Second), []byte("refused"))
		require.ErrorIs(t, err, ErrNoSpace)
		require.ErrorContains(t, err, "below the reserve of 67108864")
		require.NoError(t, n.j.Status().Err, "the node is up, not halted")

		require.NoError(t, syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, "size=256m"))
		n.j.checkSpace()
		propose(t, n, "a")
		require.False(t, n.sm.has("refused"))
	})
}
