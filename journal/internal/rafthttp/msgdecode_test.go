package rafthttp

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// appendMsg is a MsgApp carrying n 256-byte entries, as the stream carries
// on every write.
func appendMsg(n int) *raftpb.Message {
	m := &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)),
		Term: new(uint64(3)), LogTerm: new(uint64(3)), Index: new(uint64(100)), Commit: new(uint64(99))}
	for i := range n {
		m.Entries = append(m.Entries, &raftpb.Entry{Term: new(uint64(3)), Index: new(uint64(101 + i)),
			Type: raftpb.EntryNormal.Enum(), Data: make([]byte, 256)})
	}
	return m
}

// msgSeeds are encodings decodeMessage decodes itself, and some it hands
// to proto.Unmarshal.
func msgSeeds(t testing.TB) [][]byte {
	enc := func(m *raftpb.Message) []byte {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		return b
	}
	var extra []byte
	extra = protowire.AppendTag(extra, 99, protowire.VarintType)
	extra = protowire.AppendVarint(extra, 7)
	return [][]byte{
		enc(appendMsg(3)),
		enc(&raftpb.Message{Type: raftpb.MsgAppResp.Enum(), From: new(uint64(2)), To: new(uint64(1)),
			Term: new(uint64(3)), Index: new(uint64(103)), Reject: new(true), RejectHint: new(uint64(50)), LogTerm: new(uint64(2))}),
		enc(&raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(3)),
			Context: []byte("read-index"), Commit: new(uint64(7))}),
		enc(&raftpb.Message{Type: raftpb.MsgVote.Enum(), From: new(uint64(1)), To: new(uint64(3)), Vote: new(uint64(1)), Context: []byte{}}),
		enc(&raftpb.Message{Type: raftpb.MsgProp.Enum(), Entries: []*raftpb.Entry{{}, {Data: []byte{}},
			{Type: raftpb.EntryConfChangeV2.Enum(), Data: []byte("cc")}}}),
		enc(&raftpb.Message{Type: raftpb.MsgSnap.Enum(), Snapshot: &raftpb.Snapshot{Data: []byte("img"),
			Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(9)), Term: new(uint64(2))}}}),
		enc(&raftpb.Message{Type: raftpb.MsgStorageAppend.Enum(), Responses: []*raftpb.Message{{Type: raftpb.MsgAppResp.Enum()}}}),
		append(enc(heartbeat(2, 1)), extra...),                       // an unknown field
		append(enc(heartbeat(2, 1)), enc(heartbeat(3, 4))...),        // fields twice: the last wins
		{0x08, 0xff, 0xff, 0xff, 0xff, 0x0f},                         // an unknown message type
		{0x3a, 0x02, 0x08, 0x63},                                     // an unknown entry type
		{0x10, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}, // a truncated varint
		{0x3a, 0x05, 0x22, 0x01},                                     // a truncated entry
		{0x12, 0x01, 0x00},                                           // to with the bytes wire type
		{},
	}
}

// decodeMessage returns what proto.Unmarshal returns, and decodes the
// messages the stream carries on every write itself.
func TestDecodeMessageMatchesProtoUnmarshal(t *testing.T) {
	for i, b := range msgSeeds(t) {
		got, err := decodeMessage(b)
		want := &raftpb.Message{}
		wantErr := proto.Unmarshal(b, want)
		if wantErr != nil {
			require.Error(t, err, "seed %d", i)
			continue
		}
		require.NoError(t, err, "seed %d", i)
		require.True(t, proto.Equal(want, got), "seed %d: got %v, want %v", i, got, want)
	}
	for i := range 5 {
		b := msgSeeds(t)[i]
		_, ok := decodeMessageFast(b)
		require.True(t, ok, "seed %d decodes without proto.Unmarshal", i)
	}
}

// A MsgApp of 64 entries decodes in four allocations (the message, the
// entries, their pointers, their data), where proto.Unmarshal makes
// about four an entry.
func TestDecodeMessageAllocations(t *testing.T) {
	b, err := proto.Marshal(appendMsg(64))
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := decodeMessage(b); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 4.0)
}

// FuzzDecodeFrameMessage checks decodeMessage against proto.Unmarshal on
// arbitrary bytes: both fail, or both return equal messages, which hold
// no memory of the input.
func FuzzDecodeFrameMessage(f *testing.F) {
	for _, b := range msgSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeMessage(b)
		want := &raftpb.Message{}
		wantErr := proto.Unmarshal(b, want)
		if wantErr != nil {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		clear(b) // the frame buffer is reused: nothing decoded may alias it
		require.True(t, proto.Equal(want, got), "got %v, want %v", got, want)
	})
}
