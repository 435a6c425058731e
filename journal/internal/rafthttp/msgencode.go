package rafthttp

import (
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Encoding of the raft messages a stream carries. proto.Marshal walks a
// message by reflection, sizing it first and encoding it second; on the
// write path it is called for every message to every peer, on the raft
// loop. appendMessage encodes the messages the stream carries on every
// write (appends, their responses, heartbeats, votes, forwarded
// proposals) with protowire directly, into one buffer sized once, in the
// field order proto.Marshal uses (by field number), and leaves every other
// message (a snapshot, storage responses, unknown fields) to proto.Marshal.

// marshalFast reports whether appendMessage encodes m: it carries no
// snapshot, no responses and no unknown fields, in it or its entries.
func marshalFast(m *raftpb.Message) bool {
	if m.Snapshot != nil || len(m.Responses) > 0 || len(m.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, e := range m.Entries {
		if e == nil || len(e.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
	}
	return true
}

// appendMessage appends the encoding of m to buf, growing buf once, and
// returns false (buf unchanged) for a message marshalFast refuses.
func appendMessage(buf []byte, m *raftpb.Message) ([]byte, bool) {
	if !marshalFast(m) {
		return buf, false
	}
	size := messageSize(m)
	if cap(buf)-len(buf) < size {
		buf = append(make([]byte, 0, len(buf)+size), buf...)
	}
	if m.Type != nil {
		buf = appendVarintField(buf, msgFieldType, uint64(*m.Type))
	}
	buf = appendOptUint(buf, msgFieldTo, m.To)
	buf = appendOptUint(buf, msgFieldFrom, m.From)
	buf = appendOptUint(buf, msgFieldTerm, m.Term)
	buf = appendOptUint(buf, msgFieldLogTerm, m.LogTerm)
	buf = appendOptUint(buf, msgFieldIndex, m.Index)
	for _, e := range m.Entries {
		buf = protowire.AppendTag(buf, msgFieldEntries, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(entrySize(e)))
		buf = appendEntry(buf, e)
	}
	buf = appendOptUint(buf, msgFieldCommit, m.Commit)
	if m.Reject != nil {
		buf = appendVarintField(buf, msgFieldReject, protowire.EncodeBool(*m.Reject))
	}
	buf = appendOptUint(buf, msgFieldRejectHint, m.RejectHint)
	if m.Context != nil {
		buf = appendBytesField(buf, msgFieldContext, m.Context)
	}
	buf = appendOptUint(buf, msgFieldVote, m.Vote)
	return buf, true
}

// appendEntry appends the encoding of e (without its tag and length).
func appendEntry(buf []byte, e *raftpb.Entry) []byte {
	if e.Type != nil {
		buf = appendVarintField(buf, entFieldType, uint64(*e.Type))
	}
	buf = appendOptUint(buf, entFieldTerm, e.Term)
	buf = appendOptUint(buf, entFieldIndex, e.Index)
	if e.Data != nil {
		buf = appendBytesField(buf, entFieldData, e.Data)
	}
	return buf
}

// messageSize is the length of m's encoding by appendMessage.
func messageSize(m *raftpb.Message) int {
	n := 0
	if m.Type != nil {
		n += varintFieldSize(msgFieldType, uint64(*m.Type))
	}
	n += optUintSize(msgFieldTo, m.To) + optUintSize(msgFieldFrom, m.From) +
		optUintSize(msgFieldTerm, m.Term) + optUintSize(msgFieldLogTerm, m.LogTerm) +
		optUintSize(msgFieldIndex, m.Index) + optUintSize(msgFieldCommit, m.Commit) +
		optUintSize(msgFieldRejectHint, m.RejectHint) + optUintSize(msgFieldVote, m.Vote)
	for _, e := range m.Entries {
		n += bytesFieldSize(msgFieldEntries, entrySize(e))
	}
	if m.Reject != nil {
		n += varintFieldSize(msgFieldReject, protowire.EncodeBool(*m.Reject))
	}
	if m.Context != nil {
		n += bytesFieldSize(msgFieldContext, len(m.Context))
	}
	return n
}

// entrySize is the length of e's encoding by appendEntry.
func entrySize(e *raftpb.Entry) int {
	n := optUintSize(entFieldTerm, e.Term) + optUintSize(entFieldIndex, e.Index)
	if e.Type != nil {
		n += varintFieldSize(entFieldType, uint64(*e.Type))
	}
	if e.Data != nil {
		n += bytesFieldSize(entFieldData, len(e.Data))
	}
	return n
}

func appendVarintField(buf []byte, num protowire.Number, v uint64) []byte {
	buf = protowire.AppendTag(buf, num, protowire.VarintType)
	return protowire.AppendVarint(buf, v)
}

func appendOptUint(buf []byte, num protowire.Number, v *uint64) []byte {
	if v == nil {
		return buf
	}
	return appendVarintField(buf, num, *v)
}

func appendBytesField(buf []byte, num protowire.Number, v []byte) []byte {
	buf = protowire.AppendTag(buf, num, protowire.BytesType)
	return protowire.AppendBytes(buf, v)
}

func varintFieldSize(num protowire.Number, v uint64) int {
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func optUintSize(num protowire.Number, v *uint64) int {
	if v == nil {
		return 0
	}
	return varintFieldSize(num, *v)
}

func bytesFieldSize(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// encodeMessage returns m's encoding: appendMessage's, or proto.Marshal's
// for a message it leaves to proto.Marshal.
func encodeMessage(m *raftpb.Message) ([]byte, error) {
	if b, ok := appendMessage(nil, m); ok {
		return b, nil
	}
	return proto.Marshal(m)
}
