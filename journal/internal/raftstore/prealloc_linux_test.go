package raftstore

import (
	"math"
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

// A WAL's size runs a step ahead of its appends on a real disk, so a synced
// append changes no inode size; a crash leaves the zeroed rest of that step
// behind the last synced batch, and the store opens with every synced
// entry.
func TestWALSizeRunsAheadOfItsAppendsAndItsZeroedTailReplays(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{FS: vfs.Default, Dir: dir})
	require.NoError(t, err)
	require.NoError(t, s.Append(hardState(1, 1, 0), ents(1, 10, 1), nil, true))
	require.NoError(t, s.Append(hardState(1, 1, 10), ents(11, 20, 1), nil, true))

	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	require.NoError(t, err)
	require.NotEmpty(t, logs)
	newest := logs[len(logs)-1]
	fi, err := os.Stat(newest)
	require.NoError(t, err)
	require.GreaterOrEqual(t, fi.Size(), int64(walPreallocStep), "the WAL's size covers the allocated step")

	// A power cut after the synced appends: the files as they are now,
	// copied while the store is open (no clean close, no EOF trailer).
	crashed := t.TempDir()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(crashed, e.Name()), b, 0o600))
	}
	require.NoError(t, s.Close())

	s, err = Open(Options{FS: vfs.Default, Dir: crashed})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	last, err := s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(20), last)
	got, err := s.Entries(1, 21, math.MaxUint64)
	require.NoError(t, err)
	requireEntries(t, ents(1, 20, 1), got)
	require.Equal(t, uint64(10), s.HardState().GetCommit())
}
