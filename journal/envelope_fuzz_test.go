package journal

import (
	"bytes"
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// FuzzEntryDecoders feeds arbitrary bytes to the decoders of what a log
// entry or an image header carries: the envelope of a normal entry, a conf
// change with its context, and the membership blob. Each either decodes or
// fails with ErrMalformed or, for a version field (an envelope's kind, a
// membership's "v") this code does not read, ErrUnknownVersion: never a
// panic, never a silent skip. An envelope that decodes encodes back to the
// same bytes, and a membership that decodes survives its own encoding.
func FuzzEntryDecoders(f *testing.F) {
	f.Add(encodeUser([16]byte{1, 2}, []byte("data")))
	f.Add(encodeUserSince([16]byte{3}, 41, []byte("data")))
	f.Add(encodeTimestamp(1_700_000_000_000_000_000))
	f.Add(encodeVersion(2))
	f.Add(encodeCheckMark(1))
	f.Add(encodeCheckMark(2))
	f.Add([]byte{kindCheck, checkMarkOf, 1}) // format 1 has the plain mark
	f.Add(encodeCheckClear())
	f.Add(encodeCheckReport(7, 2, bytes.Repeat([]byte{0xab}, 32)))
	f.Add([]byte{kindCheck, 9})                    // an operation of a newer format
	f.Add([]byte{kindCheck, checkReport, 0, 0, 0}) // a report cut short
	f.Add([]byte{})
	f.Add([]byte{9, 0, 0, 0, 2})
	f.Add([]byte(`{"v":2,"voters":[1],"members":{}}`))
	f.Add([]byte(`{"v":1,"voters":[1],"members":{"1":{"id":1,"addr":"a","max_version":2}},"version":2}`))
	cc, _ := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(uint64(2)),
		Context: []byte(`{"addr":"127.0.0.1:1","role":"follower","key":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}`)})
	f.Add(cc)
	f.Add(newMembership().encode())
	f.Add([]byte(`{"v":1,"index":1,"voters":[1],"members":{"1":{"id":1,"addr":"a"}},"dedupe_window":10000}`))
	cc, _ = proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(uint64(1)),
		Context: []byte(`{"addr":"127.0.0.1:1","role":"follower","key":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"dedupe_window":10000}`)})
	f.Add(cc)
	f.Add([]byte(`{"v":1,"voters":[1,2],"members":{"1":{"id":1,"addr":"a"}},"keys":[{"i":3,"k":[1]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if env, err := decodeEnvelope(b); err != nil {
			unknown := len(b) > 0 && (b[0] < kindUser || b[0] > kindCheck) ||
				len(b) > 1 && b[0] == kindCheck && (b[1] < checkMark || b[1] > checkMarkOf)
			if errors.Is(err, ErrUnknownVersion) != unknown || errors.Is(err, ErrMalformed) == unknown {
				t.Fatalf("envelope %x: %v", b, err)
			}
		} else {
			var again []byte
			switch env.kind {
			case kindUser:
				if env.bounded {
					again = encodeUserSince(env.key, env.since, env.data)
				} else {
					again = encodeUser(env.key, env.data)
				}
			case kindTimestamp:
				again = encodeTimestamp(env.ts)
			case kindVersion:
				v, err := decodeVersion(b)
				if err != nil {
					t.Fatalf("version entry decoded as an envelope but not as a version: %v", err)
				}
				again = encodeVersion(v)
			case kindCheck:
				switch c := env.check; c.op {
				case checkMark:
					again = encodeCheckMark(c.format)
				case checkReport:
					again = encodeCheckReport(c.mark, c.from, c.digest)
				case checkClear:
					again = encodeCheckClear()
				}
			default:
				t.Fatalf("envelope of kind %d decoded", env.kind)
			}
			if !bytes.Equal(again, b) {
				t.Fatalf("envelope %x re-encodes as %x", b, again)
			}
		}
		e := &raftpb.Entry{Type: raftpb.EntryConfChange.Enum(), Index: new(uint64(7)), Data: b}
		if _, _, err := decodeConfChange(e); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("conf change: %v", err)
		}
		m, err := decodeMembership(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownVersion) {
				t.Fatalf("membership: %v", err)
			}
			return
		}
		m2, err := decodeMembership(m.encode())
		if err != nil {
			t.Fatalf("membership %s does not decode after its own encoding: %v", m.encode(), err)
		}
		if !bytes.Equal(m2.encode(), m.encode()) {
			t.Fatalf("membership changes through a round trip: %s, then %s", m.encode(), m2.encode())
		}
	})
}
