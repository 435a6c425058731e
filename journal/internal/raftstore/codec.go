package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ErrCorrupt marks a record or a store that cannot be decoded or breaks an
// invariant. Check with errors.Is.
var ErrCorrupt = errors.New("raftstore: corrupt")

// ErrClosed is returned by every method called after Close. The store
// closes with its journal, whose ErrClosed is this value: a read of a closed
// journal's log fails with journal.ErrClosed, the sentinel its caller can
// name.
var ErrClosed = errors.New("journal: closed")

// ErrNoMembership is returned by MembershipAt when no membership was saved
// at or before the index (or it was pruned by Compact).
var ErrNoMembership = errors.New("raftstore: no membership at or before index")

// formatVersion is the on-disk layout written to m/fmt.
const formatVersion = 1

var (
	keyFormat    = []byte("m/fmt")
	keyHardState = []byte("m/hs")
	keySnapshot  = []byte("m/snap")
	keyTrunc     = []byte("m/trunc")
	confPrefix   = []byte("m/conf/")
	confEnd      = []byte("m/conf0") // '0' == '/'+1: exclusive upper bound of m/conf/*
	logPrefix    = []byte("l/")
	logEnd       = []byte("l0") // exclusive upper bound of every l/* key
)

func indexKey(prefix []byte, index uint64) []byte {
	k := make([]byte, len(prefix)+8)
	copy(k, prefix)
	binary.BigEndian.PutUint64(k[len(prefix):], index)
	return k
}

func entryKey(index uint64) []byte { return indexKey(logPrefix, index) }
func confKey(index uint64) []byte  { return indexKey(confPrefix, index) }

// decodeIndexKey returns the index in an l/ or m/conf/ key.
func decodeIndexKey(prefix, key []byte) (uint64, error) {
	if len(key) != len(prefix)+8 || string(key[:len(prefix)]) != string(prefix) {
		return 0, fmt.Errorf("%w: key %q is not %s<8-byte index>", ErrCorrupt, key, prefix)
	}
	return binary.BigEndian.Uint64(key[len(prefix):]), nil
}

// Entry value layout: version byte (1), flags byte, uvarint term, uvarint
// type (if flagType), data (the rest, if flagData). The index lives in the
// key. The flags keep proto field presence, so that a decoded entry has the
// same proto.Size as the one raft appended (raft limits messages by it).
const (
	entryVersion = 1
	flagType     = 1 << 0
	flagData     = 1 << 1
	knownFlags   = flagType | flagData
)

// appendEntryValue appends the encoding of e to buf.
func appendEntryValue(buf []byte, e *raftpb.Entry) []byte {
	var flags byte
	if e.Type != nil {
		flags |= flagType
	}
	if e.Data != nil {
		flags |= flagData
	}
	buf = append(buf, entryVersion, flags)
	buf = binary.AppendUvarint(buf, e.GetTerm())
	if e.Type != nil {
		buf = binary.AppendUvarint(buf, uint64(e.GetType()))
	}
	if e.Data != nil {
		buf = append(buf, e.Data...)
	}
	return buf
}

// decodeEntryTerm reads only the term of an encoded entry.
func decodeEntryTerm(v []byte) (uint64, error) {
	if len(v) < 2 || v[0] != entryVersion || v[1]&^knownFlags != 0 {
		return 0, fmt.Errorf("%w: entry header %x", ErrCorrupt, head(v))
	}
	term, n := binary.Uvarint(v[2:])
	if n <= 0 {
		return 0, fmt.Errorf("%w: entry term varint", ErrCorrupt)
	}
	return term, nil
}

// entrySize is proto.Size(e) for an entry without unknown fields, without
// reflection: raft limits messages by proto.Size, and Entries has to count
// every entry it returns.
func entrySize(e *raftpb.Entry) uint64 {
	var n uint64
	if e.Term != nil {
		n += 1 + uvarintLen(*e.Term)
	}
	if e.Index != nil {
		n += 1 + uvarintLen(*e.Index)
	}
	if e.Type != nil {
		// Enums are encoded as int32 varints: negative ones take 10 bytes.
		n += 1 + uvarintLen(uint64(int64(*e.Type)))
	}
	if e.Data != nil {
		n += 1 + uvarintLen(uint64(len(e.Data))) + uint64(len(e.Data))
	}
	return n
}

func uvarintLen(v uint64) uint64 {
	n := uint64(1)
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// entrySlab allocates the entries of one read in a few large allocations
// instead of four small ones per entry. The entries share its arrays, so
// they live as long as any of them does; reads are short-lived pages.
type entrySlab struct {
	ents  []raftpb.Entry
	nums  []uint64
	types []raftpb.EntryType
}

func newEntrySlab(n int) *entrySlab {
	return &entrySlab{
		ents:  make([]raftpb.Entry, 0, n),
		nums:  make([]uint64, 0, 2*n),
		types: make([]raftpb.EntryType, 0, n),
	}
}

// decodeEntryInto is decodeEntry allocating from slab (when it has room)
// and copying data into one buffer per page.
func decodeEntryInto(slab *entrySlab, data *[]byte, index uint64, v []byte) (*raftpb.Entry, error) {
	if len(slab.ents) == cap(slab.ents) {
		return decodeEntry(index, v)
	}
	if len(v) < 2 || v[0] != entryVersion || v[1]&^knownFlags != 0 {
		return nil, fmt.Errorf("%w: entry %d: header %x", ErrCorrupt, index, head(v))
	}
	flags := v[1]
	rest := v[2:]
	term, n := binary.Uvarint(rest)
	if n <= 0 {
		return nil, fmt.Errorf("%w: entry %d: term varint", ErrCorrupt, index)
	}
	rest = rest[n:]
	slab.ents = append(slab.ents, raftpb.Entry{})
	e := &slab.ents[len(slab.ents)-1]
	slab.nums = append(slab.nums, term, index)
	e.Term, e.Index = &slab.nums[len(slab.nums)-2], &slab.nums[len(slab.nums)-1]
	if flags&flagType != 0 {
		t, n := binary.Uvarint(rest)
		if n <= 0 {
			return nil, fmt.Errorf("%w: entry %d: type varint", ErrCorrupt, index)
		}
		if _, ok := raftpb.EntryType_name[int32(t)]; !ok || t > 1<<31 {
			return nil, fmt.Errorf("%w: entry %d: unknown entry type %d", ErrCorrupt, index, t)
		}
		slab.types = append(slab.types, raftpb.EntryType(t))
		e.Type = &slab.types[len(slab.types)-1]
		rest = rest[n:]
	}
	if flags&flagData != 0 && len(rest) == 0 {
		e.Data = []byte{} // present but empty: proto keeps the difference
	} else if flags&flagData != 0 {
		if cap(*data)-len(*data) < len(rest) {
			*data = make([]byte, 0, max(64<<10, len(rest)))
		}
		start := len(*data)
		*data = append(*data, rest...)
		e.Data = (*data)[start:len(*data):len(*data)] // full slice: appends copy
	} else if len(rest) != 0 {
		return nil, fmt.Errorf("%w: entry %d: %d trailing bytes", ErrCorrupt, index, len(rest))
	}
	return e, nil
}

// decodeEntry decodes an entry stored at index. The data is copied: Pebble
// owns v only until the iterator moves.
func decodeEntry(index uint64, v []byte) (*raftpb.Entry, error) {
	if len(v) < 2 || v[0] != entryVersion || v[1]&^knownFlags != 0 {
		return nil, fmt.Errorf("%w: entry %d: header %x", ErrCorrupt, index, head(v))
	}
	flags := v[1]
	rest := v[2:]
	term, n := binary.Uvarint(rest)
	if n <= 0 {
		return nil, fmt.Errorf("%w: entry %d: term varint", ErrCorrupt, index)
	}
	rest = rest[n:]
	e := &raftpb.Entry{Term: new(term), Index: new(index)}
	if flags&flagType != 0 {
		t, n := binary.Uvarint(rest)
		if n <= 0 {
			return nil, fmt.Errorf("%w: entry %d: type varint", ErrCorrupt, index)
		}
		if _, ok := raftpb.EntryType_name[int32(t)]; !ok || t > 1<<31 {
			return nil, fmt.Errorf("%w: entry %d: unknown entry type %d", ErrCorrupt, index, t)
		}
		typ := raftpb.EntryType(t)
		e.Type = &typ
		rest = rest[n:]
	}
	if flags&flagData != 0 {
		e.Data = append(make([]byte, 0, len(rest)), rest...)
	} else if len(rest) != 0 {
		return nil, fmt.Errorf("%w: entry %d: %d trailing bytes", ErrCorrupt, index, len(rest))
	}
	return e, nil
}

func head(v []byte) []byte {
	if len(v) > 8 {
		return v[:8]
	}
	return v
}

// truncState is (index, term) of the entry just before FirstIndex.
type truncState struct{ index, term uint64 }

func encodeTrunc(t truncState) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, t.index)
	binary.BigEndian.PutUint64(b[8:], t.term)
	return b
}

func decodeTrunc(v []byte) (truncState, error) {
	if len(v) != 16 {
		return truncState{}, fmt.Errorf("%w: m/trunc has %d bytes, want 16", ErrCorrupt, len(v))
	}
	return truncState{binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])}, nil
}

func decodeHardState(v []byte) (*raftpb.HardState, error) {
	hs := &raftpb.HardState{}
	if err := proto.Unmarshal(v, hs); err != nil {
		return nil, fmt.Errorf("%w: m/hs: %w", ErrCorrupt, err)
	}
	return hs, nil
}

func decodeSnapshot(v []byte) (*raftpb.Snapshot, error) {
	snap := &raftpb.Snapshot{}
	if err := proto.Unmarshal(v, snap); err != nil {
		return nil, fmt.Errorf("%w: m/snap: %w", ErrCorrupt, err)
	}
	return snap, nil
}

func decodeFormat(v []byte) error {
	if len(v) != 1 || v[0] != formatVersion {
		return fmt.Errorf("%w: unknown format version %x (this build reads %d)", ErrCorrupt, v, formatVersion)
	}
	return nil
}
