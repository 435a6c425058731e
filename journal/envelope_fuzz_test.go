package journal

import (
	"bytes"
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/membership"
)

// FuzzEntryDecoders feeds arbitrary bytes to the decoders of what a log
// entry or an image header carries beside the envelope (fuzzed in
// journal/internal/envelope): a conf change with its context, and the
// membership blob. Each either decodes or fails with ErrMalformed or, for
// a membership's "v" this code does not read, ErrUnknownVersion: never a
// panic, never a silent skip. A membership that decodes survives its own
// encoding.
func FuzzEntryDecoders(f *testing.F) {
	f.Add(envelope.EncodeUser([16]byte{1, 2}, []byte("data")))
	f.Add(envelope.EncodeUserSince([16]byte{3}, 41, []byte("data")))
	f.Add(envelope.EncodeTimestamp(1_700_000_000_000_000_000))
	f.Add(envelope.EncodeVersion(2))
	f.Add(envelope.EncodeCheckMark(1))
	f.Add(envelope.EncodeCheckMark(2))
	f.Add([]byte{envelope.KindCheck, envelope.CheckMarkOf, 1}) // format 1 has the plain mark
	f.Add(envelope.EncodeCheckClear())
	f.Add(envelope.EncodeCheckReport(7, 2, bytes.Repeat([]byte{0xab}, 32)))
	f.Add([]byte{envelope.KindCheck, 9})                             // an operation of a newer format
	f.Add([]byte{envelope.KindCheck, envelope.CheckReport, 0, 0, 0}) // a report cut short
	f.Add([]byte{})
	f.Add([]byte{9, 0, 0, 0, 2})
	f.Add([]byte(`{"v":2,"voters":[1],"members":{}}`))
	f.Add([]byte(`{"v":1,"voters":[1],"members":{"1":{"id":1,"addr":"a","max_version":2}},"version":2}`))
	cc, _ := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(uint64(2)),
		Context: []byte(`{"addr":"127.0.0.1:1","role":"follower","key":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}`)})
	f.Add(cc)
	f.Add(membership.New().Encode())
	f.Add([]byte(`{"v":1,"index":1,"voters":[1],"members":{"1":{"id":1,"addr":"a"}},"dedupe_window":10000}`))
	cc, _ = proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(uint64(1)),
		Context: []byte(`{"addr":"127.0.0.1:1","role":"follower","key":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"dedupe_window":10000}`)})
	f.Add(cc)
	f.Add([]byte(`{"v":1,"voters":[1,2],"members":{"1":{"id":1,"addr":"a"}},"keys":[{"i":3,"k":[1]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e := &raftpb.Entry{Type: raftpb.EntryConfChange.Enum(), Index: new(uint64(7)), Data: b}
		if _, _, err := membership.DecodeConfChange(e); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("conf change: %v", err)
		}
		m, err := membership.Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownVersion) {
				t.Fatalf("membership: %v", err)
			}
			return
		}
		m2, err := membership.Decode(m.Encode())
		if err != nil {
			t.Fatalf("membership %s does not decode after its own encoding: %v", m.Encode(), err)
		}
		if !bytes.Equal(m2.Encode(), m.Encode()) {
			t.Fatalf("membership changes through a round trip: %s, then %s", m.Encode(), m2.Encode())
		}
	})
}
