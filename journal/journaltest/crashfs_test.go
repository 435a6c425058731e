package journaltest_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/journaltest"
)

// A slow disk (SetSyncDelay) makes the syncs of the files it names take
// the delay in virtual time, and only those; 0 makes the disk fast
// again, and what a slow sync synced survives a power cut.
func TestSyncDelaySlowsTheSyncsOfMatchingFilesOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := journaltest.NewCrashFS()
		const d = 3 * time.Second
		fs.SetSyncDelay(d, ".log")
		got, suffix := fs.SyncDelay()
		require.Equal(t, d, got)
		require.Equal(t, ".log", suffix)

		timed := func(name string) time.Duration {
			f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
			require.NoError(t, err)
			defer func() { require.NoError(t, f.Close()) }()
			_, err = f.Write([]byte("entry"))
			require.NoError(t, err)
			start := time.Now()
			require.NoError(t, f.Sync())
			return time.Since(start)
		}
		require.Equal(t, d, timed("000002.log"), "a WAL file's sync waits out the delay")
		require.Zero(t, timed("MANIFEST-000001"), "another file's sync does not")
		dir, err := fs.OpenDir("")
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, dir.Sync())
		require.Zero(t, time.Since(start), "a directory's sync does not")
		require.NoError(t, dir.Close())

		// What a slow sync synced survives a power cut.
		fs.SetSyncDelay(0, "")
		require.Zero(t, timed("000004.log"), "0 restores a fast disk")
		kept := fs.CutNow()
		_, err = kept.Stat("000002.log")
		require.NoError(t, err, "the synced WAL file survives the cut")
	})
}
