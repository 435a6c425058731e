package raftstore

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// On a real disk a new store's WAL occupies about a step of blocks, not
// the 110% of a memtable Pebble asks to preallocate.
func TestNewStoresWALOccupiesAStepOfDisk(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{FS: vfs.Default, Dir: dir})
	require.NoError(t, err)
	require.NoError(t, s.Append(hardState(1, 1, 0), ents(1, 10, 1), nil, true))
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	require.NoError(t, err)
	require.NotEmpty(t, logs)
	var blocks int64
	for _, l := range logs {
		fi, err := os.Stat(l)
		require.NoError(t, err)
		blocks += fi.Sys().(*syscall.Stat_t).Blocks * 512
	}
	require.NoError(t, s.Close())
	require.LessOrEqual(t, blocks, int64(2*walPreallocStep), "the WALs occupy %d bytes", blocks)
}
