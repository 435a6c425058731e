package rafthttp

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// requireEncodesAsProto checks encodeMessage against proto.Marshal for m:
// the same bytes, which decode to a message equal to m.
func requireEncodesAsProto(t *testing.T, m *raftpb.Message) {
	t.Helper()
	want, wantErr := proto.Marshal(m)
	got, err := encodeMessage(m)
	if wantErr != nil {
		require.Error(t, err)
		return
	}
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "encoding of %v", m)
	back := &raftpb.Message{}
	require.NoError(t, proto.Unmarshal(got, back))
	require.True(t, proto.Equal(m, back), "got %v, want %v", back, m)
}

// encodeMessage writes what proto.Marshal writes, and encodes the
// messages the stream carries on every write itself.
func TestEncodeMessageMatchesProtoMarshal(t *testing.T) {
	for i, b := range msgSeeds(t) {
		m := &raftpb.Message{}
		if proto.Unmarshal(b, m) != nil {
			continue
		}
		t.Run("", func(t *testing.T) { requireEncodesAsProto(t, m) })
		_, fast := appendMessage(nil, m)
		switch {
		case i < 5:
			require.True(t, fast, "seed %d is encoded without proto.Marshal", i)
		case i < 8: // a snapshot, storage responses, an unknown field
			require.False(t, fast, "seed %d is left to proto.Marshal", i)
		}
	}
	requireEncodesAsProto(t, &raftpb.Message{})
	requireEncodesAsProto(t, &raftpb.Message{Entries: []*raftpb.Entry{{Index: new(uint64(1 << 40))}}, Reject: new(false)})
}

// A MsgApp of 64 entries encodes in one allocation.
func TestEncodeMessageAllocations(t *testing.T) {
	m := appendMsg(64)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := encodeMessage(m); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 1.0)
}

// FuzzEncodeMessage checks encodeMessage against proto.Marshal on every
// message proto.Unmarshal decodes from arbitrary bytes.
func FuzzEncodeMessage(f *testing.F) {
	for _, b := range msgSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &raftpb.Message{}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		requireEncodesAsProto(t, m)
	})
}
