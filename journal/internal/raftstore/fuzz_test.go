package raftstore

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// FuzzDecodeEntry: any bytes either decode to an entry that re-encodes to
// an equal entry (varints need not be minimal), or give an ErrCorrupt error; never a panic.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(uint64(1), appendEntryValue(nil, ent(1, 1, "hello")))
	f.Add(uint64(7), appendEntryValue(nil, &raftpb.Entry{Term: new(uint64(3)), Index: new(uint64(7))}))
	f.Add(uint64(9), appendEntryValue(nil, &raftpb.Entry{Term: new(uint64(3)), Index: new(uint64(9)), Type: new(raftpb.EntryConfChangeV2), Data: []byte{}}))
	f.Add(uint64(2), []byte{1, 3, 0x80})
	f.Add(uint64(2), []byte{1, 1, 5, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint64(2), []byte{})
	f.Fuzz(func(t *testing.T, index uint64, v []byte) {
		e, err := decodeEntry(index, v)
		term, terr := decodeEntryTerm(v)
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			return
		}
		require.NoError(t, terr)
		require.Equal(t, e.GetTerm(), term)
		require.Equal(t, index, e.GetIndex())
		again, err := decodeEntry(index, appendEntryValue(nil, e))
		require.NoError(t, err)
		require.True(t, proto.Equal(e, again))
		require.Equal(t, uint64(proto.Size(e)), entrySize(e), "entrySize agrees with proto.Size")
		slab := newEntrySlab(1)
		var data []byte
		fromSlab, err := decodeEntryInto(slab, &data, index, v)
		require.NoError(t, err)
		require.True(t, proto.Equal(e, fromSlab), "slab decoding agrees")
	})
}

// FuzzDecodeMeta: the metadata decoders and key parsers never panic, and
// report failures as ErrCorrupt.
func FuzzDecodeMeta(f *testing.F) {
	hs, _ := proto.Marshal(hardState(3, 2, 9))
	snap, _ := proto.Marshal(snapshot(5, 2, 1, 2, 3))
	f.Add(hs)
	f.Add(snap)
	f.Add(encodeTrunc(truncState{4, 2}))
	f.Add([]byte{formatVersion})
	f.Add(entryKey(42))
	f.Add(confKey(42))
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, v []byte) {
		check := func(err error) {
			if err != nil {
				require.ErrorIs(t, err, ErrCorrupt)
			}
		}
		_, err := decodeHardState(v)
		check(err)
		_, err = decodeSnapshot(v)
		check(err)
		tr, err := decodeTrunc(v)
		check(err)
		if err == nil {
			require.Equal(t, v, encodeTrunc(tr))
		}
		check(decodeFormat(v))
		i, err := decodeIndexKey(logPrefix, v)
		check(err)
		if err == nil {
			require.Equal(t, v, entryKey(i))
		}
		_, err = decodeIndexKey(confPrefix, v)
		check(err)
	})
}
