package rafthttp

import (
	"math"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Decoding of the raft messages of a stream frame. raftpb's optional
// fields are pointers: proto.Unmarshal allocates each scalar of a message
// and of every entry on its own (four allocations an entry, up to ten a
// message). decodeMessage decodes the messages the stream carries on
// every write (appends, their responses, heartbeats, forwarded proposals)
// into a few allocations a message, and hands every other encoding to
// proto.Unmarshal, so that it returns what proto.Unmarshal returns.

// Field numbers of raftpb.Message (raft.proto).
const (
	msgFieldType       = 1
	msgFieldTo         = 2
	msgFieldFrom       = 3
	msgFieldTerm       = 4
	msgFieldLogTerm    = 5
	msgFieldIndex      = 6
	msgFieldEntries    = 7
	msgFieldCommit     = 8
	msgFieldReject     = 10
	msgFieldRejectHint = 11
	msgFieldContext    = 12
	msgFieldVote       = 13
)

// Field numbers of raftpb.Entry (raft.proto).
const (
	entFieldType  = 1
	entFieldTerm  = 2
	entFieldIndex = 3
	entFieldData  = 4
)

// decodeMessage decodes one encoded raftpb.Message. Its result and its
// error are proto.Unmarshal's for the same bytes.
func decodeMessage(b []byte) (*raftpb.Message, error) {
	if m, ok := decodeMessageFast(b); ok {
		return m, nil
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, err
	}
	return m, nil
}

// msgSlab holds a message and its scalar fields in one allocation.
type msgSlab struct {
	m      raftpb.Message
	typ    raftpb.MessageType
	nums   [8]uint64 // the uint64 fields, in the order of numSlot
	reject bool
}

// numSlot is the index in msgSlab.nums of each uint64 field of
// raftpb.Message.
var numSlot = [...]uint8{
	msgFieldTo: 0, msgFieldFrom: 1, msgFieldTerm: 2, msgFieldLogTerm: 3,
	msgFieldIndex: 4, msgFieldCommit: 5, msgFieldVote: 6, msgFieldRejectHint: 7,
}

// setNum stores v as the value of the message's uint64 field num and
// points that field at it.
func (s *msgSlab) setNum(num protowire.Number, v uint64) {
	fields := [len(s.nums)]**uint64{&s.m.To, &s.m.From, &s.m.Term, &s.m.LogTerm,
		&s.m.Index, &s.m.Commit, &s.m.Vote, &s.m.RejectHint}
	i := numSlot[num]
	s.nums[i] = v
	*fields[i] = &s.nums[i]
}

// entrySlot holds an entry and its scalar fields; a message's entries
// share one array of them.
type entrySlot struct {
	e     raftpb.Entry
	term  uint64
	index uint64
	typ   raftpb.EntryType
}

// decodeMessageFast decodes b when it holds only fields it decodes (all
// but snapshot and responses), each with its declared wire type, known
// enum values and no unknown fields; otherwise it returns false and the
// caller decodes b with proto.Unmarshal. As proto.Unmarshal does, a
// scalar field that occurs twice keeps its last value, each occurrence of
// entries appends an entry, and a present empty bytes field is non-nil.
// Entry data and context are copied (b is the frame's reused buffer);
// the entries of a message share one copy.
func decodeMessageFast(b []byte) (*raftpb.Message, bool) {
	nEnts, entBytes, ok := scanMessage(b)
	if !ok {
		return nil, false
	}
	s := &msgSlab{}
	m := &s.m
	var slots []entrySlot
	var data []byte
	if nEnts > 0 {
		slots = make([]entrySlot, 0, nEnts)
		m.Entries = make([]*raftpb.Entry, 0, nEnts)
		data = make([]byte, 0, entBytes)
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:] // scanMessage checked every tag and value
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			b = b[n:]
			switch num {
			case msgFieldEntries:
				slots = slots[:len(slots)+1]
				e, ok := decodeEntryInto(&slots[len(slots)-1], v, &data)
				if !ok {
					return nil, false
				}
				m.Entries = append(m.Entries, e)
			case msgFieldContext:
				m.Context = append(make([]byte, 0, len(v)), v...)
			}
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		b = b[n:]
		switch num {
		case msgFieldType:
			if !knownEnum(v, raftpb.MessageType_name) {
				return nil, false // proto.Unmarshal keeps it as an unknown field
			}
			s.typ = raftpb.MessageType(v)
			m.Type = &s.typ
		case msgFieldReject:
			s.reject = protowire.DecodeBool(v)
			m.Reject = &s.reject
		default: // a uint64 field: scanMessage admits no other varint
			s.setNum(num, v)
		}
	}
	return m, true
}

// scanMessage checks that b is a sequence of well-formed fields that
// decodeMessageFast decodes, and returns the number of entries and the
// bytes their encodings take (a bound on their data).
func scanMessage(b []byte) (nEnts, entBytes int, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, false
		}
		b = b[n:]
		switch num {
		case msgFieldEntries, msgFieldContext:
			if typ != protowire.BytesType {
				return 0, 0, false
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, 0, false
			}
			if num == msgFieldEntries {
				nEnts++
				entBytes += len(v)
			}
			b = b[n:]
		case msgFieldType, msgFieldTo, msgFieldFrom, msgFieldTerm, msgFieldLogTerm,
			msgFieldIndex, msgFieldCommit, msgFieldReject, msgFieldRejectHint, msgFieldVote:
			if typ != protowire.VarintType {
				return 0, 0, false
			}
			_, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, false
			}
			b = b[n:]
		default:
			return 0, 0, false // snapshot, responses, or an unknown field
		}
	}
	return nEnts, entBytes, true
}

// decodeEntryInto decodes the entry encoded in v into slot, copying its
// data into *data (which has room for it: scanMessage sized it), or
// returns false for an encoding it leaves to proto.Unmarshal.
func decodeEntryInto(slot *entrySlot, v []byte, data *[]byte) (*raftpb.Entry, bool) {
	e := &slot.e
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return nil, false
		}
		v = v[n:]
		switch {
		case num == entFieldData && typ == protowire.BytesType:
			d, n := protowire.ConsumeBytes(v)
			if n < 0 {
				return nil, false
			}
			v = v[n:]
			if len(d) == 0 {
				e.Data = []byte{} // present but empty: proto keeps the difference
				continue
			}
			start := len(*data)
			*data = append(*data, d...)
			e.Data = (*data)[start:len(*data):len(*data)] // full slice: appends copy
		case typ == protowire.VarintType && (num == entFieldType || num == entFieldTerm || num == entFieldIndex):
			x, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return nil, false
			}
			v = v[n:]
			switch num {
			case entFieldType:
				if !knownEnum(x, raftpb.EntryType_name) {
					return nil, false
				}
				slot.typ = raftpb.EntryType(x)
				e.Type = &slot.typ
			case entFieldTerm:
				slot.term = x
				e.Term = &slot.term
			case entFieldIndex:
				slot.index = x
				e.Index = &slot.index
			}
		default:
			return nil, false
		}
	}
	return e, true
}

// knownEnum reports whether v is a value of the enum whose names are
// names: proto.Unmarshal keeps any other value as an unknown field, which
// decodeMessageFast does not.
func knownEnum(v uint64, names map[int32]string) bool {
	if v > math.MaxInt32 {
		return false
	}
	_, known := names[int32(v)]
	return known
}
