package main

import (
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal/offline"
)

// FuzzDescribeEntry: whatever a damaged log holds, the decoders behind
// `journal entries` (the journal's envelope and conf change, the catalog's
// batch) never panic, and the line they make always encodes; a malformed
// entry says why.
func FuzzDescribeEntry(f *testing.F) {
	batch, err := catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/db", Kind: "database", Set: map[string]catalog.Value{"a": catalog.Int(1), "b": catalog.Bytes([]byte{0xff})}},
		{Type: catalog.OpUpdate, Path: "/db", Unset: []string{"a"}, Cond: catalog.Cond{Modified: 3}},
		{Type: catalog.OpMove, Path: "/db", To: "/db2"},
		{Type: catalog.OpDelete, Path: "/db2", Recursive: true},
	}}.Encode()
	require.NoError(f, err)
	user := append(append([]byte{1}, make([]byte, 16)...), batch...)
	ts := binary.BigEndian.AppendUint64([]byte{2}, 1_700_000_000_000_000_000)
	cc, err := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(uint64(2)), Context: []byte(`{"addr":"h:1","role":"follower"}`)})
	require.NoError(f, err)
	f.Add(int32(raftpb.EntryNormal), user)
	f.Add(int32(raftpb.EntryNormal), ts)
	f.Add(int32(raftpb.EntryNormal), []byte{})
	f.Add(int32(raftpb.EntryNormal), []byte{1, 2, 3})
	f.Add(int32(raftpb.EntryNormal), []byte{9})
	f.Add(int32(raftpb.EntryNormal), []byte{4, 0, 0, 0, 2})
	f.Add(int32(raftpb.EntryConfChange), cc)
	f.Add(int32(raftpb.EntryConfChange), []byte{0xff, 0xff})
	f.Add(int32(raftpb.EntryConfChangeV2), cc)
	f.Add(int32(77), []byte("x"))
	f.Fuzz(func(t *testing.T, typ int32, data []byte) {
		e := &raftpb.Entry{Index: new(uint64(5)), Term: new(uint64(2)), Type: raftpb.EntryType(typ).Enum(), Data: data}
		ent := offline.DecodeEntry(e)
		require.EqualValues(t, 5, ent.Index)
		if ent.Kind == offline.KindMalformed {
			require.Error(t, ent.Err)
		}
		line := describeEntry(ent)
		b, err := json.Marshal(line)
		require.NoError(t, err)
		var back entryJSON
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, ent.Kind, back.Kind)
	})
}
