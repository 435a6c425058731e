package raftstore

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// Flushed entries live in blob files (pebbleOptions' value separation),
// are read back from them intact, also after a reopen, and a compaction of
// the log past a blob file's entries frees that file: the log's disk
// follows its truncation point. (A file that still holds an entry the log
// keeps stays whole until then.)
func TestFlushedEntriesLiveInBlobFilesUntilCompacted(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs, 0)
	const n = 4000
	data := func(i uint64) string { return fmt.Sprintf("%0200d", i) } // above MinimumSize
	var batch []*raftpb.Entry
	for i := uint64(1); i <= n; i++ {
		batch = append(batch, ent(i, 1, data(i)))
		if len(batch) == 100 {
			require.NoError(t, s.Append(hardState(1, 1, i), batch, nil, true))
			batch = nil
		}
		if i%(n/4) == 0 {
			require.NoError(t, s.db.Flush()) // a blob file of n/4 entries
		}
	}
	blobs := s.db.Metrics().BlobFiles
	require.NotZero(t, blobs.LiveCount, "no blob file after a flush of %d entries", n)
	require.GreaterOrEqual(t, blobs.ReferencedValueSize, uint64(n*200), "entries' data is not in blob files")

	check := func(s *Store, lo uint64) {
		t.Helper()
		got, err := s.Entries(lo, n+1, 1<<30)
		require.NoError(t, err)
		require.Len(t, got, int(n+1-lo))
		for _, e := range got {
			require.Equal(t, data(e.GetIndex()), string(e.GetData()), "entry %d", e.GetIndex())
		}
	}
	check(s, 1)
	require.NoError(t, s.Close())
	s = openMem(t, fs, 0)
	check(s, 1)

	require.NoError(t, s.SetSnapshot(snapshot(n-100, 1, 1)))
	require.NoError(t, s.Compact(n-100))
	require.NoError(t, s.db.Compact(t.Context(), logPrefix, logEnd, true))
	after := s.db.Metrics().BlobFiles
	require.Less(t, after.ReferencedValueSize, uint64(200*200), "the compacted entries' values are still referenced")
	require.LessOrEqual(t, after.LiveSize, blobs.LiveSize/4+blobs.LiveSize/20, "the compacted entries' blob files are still live")
	check(s, n-99)
}
