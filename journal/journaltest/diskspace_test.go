package journaltest_test

import (
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/journaltest"
)

func TestAFullCrashFSRefusesWritesWithENOSPCUntilSpaceReturns(t *testing.T) {
	fs := journaltest.NewCrashFS()
	_, err := fs.GetDiskUsage("/")
	require.ErrorIs(t, err, vfs.ErrUnsupported, "no usage is reported by default")
	fs.SetFree(5 << 20)
	u, err := fs.GetDiskUsage("/")
	require.NoError(t, err)
	require.Equal(t, uint64(5<<20), u.AvailBytes)

	f, err := fs.Create("/a", vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	_, err = f.Write([]byte("kept"))
	require.NoError(t, err)

	fs.SetFull(true)
	_, err = f.Write([]byte("lost"))
	require.True(t, errors.Is(err, syscall.ENOSPC), "a write on a full disk: %v", err)
	require.ErrorIs(t, f.Preallocate(0, 1<<20), syscall.ENOSPC)
	_, err = fs.Create("/b", vfs.WriteCategoryUnspecified)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NoError(t, f.Sync(), "a sync of what was written goes on")
	require.NoError(t, fs.MkdirAll("/", 0o755), "an existing directory needs no space")
	require.NoError(t, f.Close())
	r, err := fs.Open("/a")
	require.NoError(t, err)
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, "kept", string(b), "reads go on, and a refused write left nothing")
	require.NoError(t, r.Close())

	fs.SetFull(false)
	fs.SetFree(-1)
	_, err = fs.Create("/b", vfs.WriteCategoryUnspecified)
	require.NoError(t, err, "space is back")
	_, err = fs.GetDiskUsage("/")
	require.ErrorIs(t, err, vfs.ErrUnsupported)
}
