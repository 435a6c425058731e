package raftstore

import (
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// appendBatchSize bounds the batch Append fills, so that the batch never
// grows (a short estimate copies it on every doubling). The entries'
// terms and indexes take their longest encodings.
func TestAppendBatchSizeCoversTheBatch(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: pebbleLogger{l: discard, h: newHalt()}})
	require.NoError(t, err)
	defer db.Close()
	typ := raftpb.EntryType_EntryConfChangeV2
	for _, sizes := range [][]int{{}, {0}, {1}, {256}, {0, 0, 0, 0}, {256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256}, {64 << 10, 3, 1 << 20}} {
		ents := make([]*raftpb.Entry, len(sizes))
		for i, n := range sizes {
			ents[i] = &raftpb.Entry{Term: proto.Uint64(math.MaxUint64), Index: proto.Uint64(math.MaxUint64 - uint64(len(sizes)-i)), Type: &typ, Data: make([]byte, n)}
		}
		b := db.NewBatch()
		for _, e := range ents {
			require.NoError(t, b.Set(entryKey(e.GetIndex()), appendEntryValue(nil, e), nil))
		}
		hs, err := proto.Marshal(&raftpb.HardState{Term: proto.Uint64(math.MaxUint64), Vote: proto.Uint64(math.MaxUint64), Commit: proto.Uint64(math.MaxUint64)})
		require.NoError(t, err)
		require.NoError(t, b.Set(keyHardState, hs, nil))
		require.NoError(t, b.Set(keyTrunc, encodeTrunc(truncState{index: math.MaxUint64, term: math.MaxUint64}), nil))
		require.LessOrEqual(t, len(b.Repr()), appendBatchSize(ents), "entries of %v bytes", sizes)
		require.NoError(t, b.Close())
	}
}
