package journal_test

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
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// TestLowDiskRefusesWritesAndRecovers: with free space under the reserve
// the node refuses writes with ErrNoSpace (507 no_space) and releases its
// ballast once under half the reserve, though it stays up; once space is
// back it takes writes again by itself and restores the ballast.
func TestLowDiskRefusesWritesAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const dir = "/data"
		mem := vfs.NewMem()
		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, Configure: func(cfg *journal.Config) {
			cfg.FS, cfg.Dir = mem, dir
			cfg.ReserveBytes = 64 << 20
			cfg.SpaceCheckInterval = time.Hour // the test runs the checks
		}})
		ctx := ctxFor(t, time.Minute)
		n := c.Node(1)
		proposeVia(ctx, t, n, "a")
		ballast := filepath.Join(dir, journal.BallastNameForTest)
		_, err := mem.Stat(ballast)
		require.NoError(t, err, "the ballast is written while the disk has room")

		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 48 << 20, TotalBytes: 2 << 30})
		require.NoError(t, n.Journal().CheckSpaceForTest())
		_, _, err = n.Journal().Propose(ctx, []byte("b"))
		require.ErrorIs(t, err, journal.ErrNoSpace)
		require.ErrorContains(t, err, "reserve of 67108864")
		rec := httptest.NewRecorder()
		journal.WriteErrorForTest(rec, err)
		require.Equal(t, http.StatusInsufficientStorage, rec.Code)
		require.Contains(t, rec.Body.String(), `"no_space"`)
		_, err = mem.Stat(ballast)
		require.NoError(t, err, "the ballast is kept above half the reserve")

		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 16 << 20, TotalBytes: 2 << 30})
		require.NoError(t, n.Journal().CheckSpaceForTest())
		_, err = mem.Stat(ballast)
		require.True(t, os.IsNotExist(err), "the ballast is released under half the reserve: %v", err)
		require.NoError(t, n.Journal().Status().Err, "a full disk does not stop the node")
		require.NoError(t, n.Journal().ReadBarrier(ctx))

		mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
		require.NoError(t, n.Journal().CheckSpaceForTest())
		proposeVia(ctx, t, n, "c")
		require.False(t, applied(n, "b"))
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
		dir := filepath.Join(mnt, "data")
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, OnDisk: true, Configure: func(cfg *journal.Config) {
			cfg.Dir = dir
			cfg.ReserveBytes = 8 << 20
			cfg.BallastBytes = 2 << 20
			cfg.SpaceCheckInterval = time.Hour // the test runs the checks
		}})
		ctx := ctxFor(t, time.Minute)
		n := c.Node(1)
		proposeVia(ctx, t, n, "a")

		filler := filepath.Join(mnt, "filler")
		tmpfs.Fill(t, filler)
		require.NoError(t, n.Journal().CheckSpaceForTest())
		_, err := os.Stat(filepath.Join(dir, journal.BallastNameForTest))
		require.True(t, os.IsNotExist(err), "a full disk releases the ballast: %v", err)
		_, _, err = n.Journal().Propose(ctx, []byte("b"))
		require.ErrorIs(t, err, journal.ErrNoSpace)
		require.NoError(t, n.Journal().Status().Err, "the node is up, not halted")

		require.NoError(t, os.Remove(filler))
		require.NoError(t, n.Journal().CheckSpaceForTest())
		proposeVia(ctx, t, n, "c")

		require.NoError(t, c.Stop(1))
		require.NoError(t, c.Restart(ctx, 1))
		require.NoError(t, n.Journal().ReadBarrier(ctx))
		require.True(t, applied(n, "a") && applied(n, "c"), "acknowledged writes survive: %v", appliedData(n))
		require.False(t, applied(n, "b"))
	})
}

// TestWALMeetsENOSPCOnARealFilesystem: with the guard off, a write that
// meets a full disk in Pebble's WAL halts the node (no panic, no exit),
// and once space is freed the restarted node opens with every
// acknowledged write and takes writes again.
func TestWALMeetsENOSPCOnARealFilesystem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mnt := tmpfs.Mount(t, 48<<20)
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, OnDisk: true, Configure: func(cfg *journal.Config) {
			cfg.Dir = filepath.Join(mnt, "data")
			cfg.ReserveBytes = -1 // no guard
		}})
		ctx := ctxFor(t, time.Minute)
		n := c.Node(1)
		proposeVia(ctx, t, n, "a")

		filler := filepath.Join(mnt, "filler")
		tmpfs.Fill(t, filler)
		var err error
		for i := 0; err == nil && i < 1000; i++ {
			// Pebble preallocates its WAL: the first writes may still fit.
			_, _, err = n.Journal().Propose(ctx, make([]byte, 64<<10))
		}
		require.ErrorIs(t, err, journal.ErrHalted)
		require.ErrorIs(t, err, syscall.ENOSPC)
		require.ErrorIs(t, n.Journal().Status().Err, journal.ErrHalted)

		_ = c.Stop(1) // may repeat the failure; it must return
		require.NoError(t, os.Remove(filler))
		require.NoError(t, c.Restart(ctx, 1))
		require.NoError(t, n.Journal().ReadBarrier(ctx))
		require.True(t, applied(n, "a"), "acknowledged writes survive")
		proposeVia(ctx, t, n, "c")
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
		c := journaltest.NewCluster(t, journaltest.Options{Voters: 1, OnDisk: true, Configure: func(cfg *journal.Config) {
			cfg.Dir = filepath.Join(mnt, "data")
			cfg.SpaceCheckInterval = time.Hour // the test runs the checks
		}})
		ctx := ctxFor(t, time.Minute)
		n := c.Node(1)
		_, _, err := n.Journal().Propose(ctx, []byte("refused"))
		require.ErrorIs(t, err, journal.ErrNoSpace)
		require.ErrorContains(t, err, "below the reserve of 67108864")
		require.NoError(t, n.Journal().Status().Err, "the node is up, not halted")

		require.NoError(t, syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, "size=256m"))
		n.Journal().CheckAndReportSpaceForTest()
		proposeVia(ctx, t, n, "a")
		require.False(t, applied(n, "refused"))
	})
}
