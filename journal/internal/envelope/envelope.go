package envelope

import (
	"encoding/binary"
	"fmt"

	"github.com/metatree/metatree/journal/internal/errs"
)

// Every normal raft entry the journal writes is an envelope:
//
//	KindUser:      [1][16-byte idempotency key][user data...]
//	KindTimestamp: [2][8-byte big-endian unix nanoseconds of the leader's clock]
//	KindUserSince: [3][16-byte idempotency key][8-byte big-endian since][user data...]
//	KindVersion:   [4][4-byte big-endian cluster version] (version.go)
//	KindCheck:     [5][operation]... (check.go)
//
// KindUserSince is a user entry that may apply only within the cluster's
// dedupe window after since, a commit index its proposer knew before it
// made the entry's first copy (see journal/internal/dedupe). It decodes as
// KindUser.
//
// An empty entry is raft's own (the leader's first entry of its term). The
// state machine only sees the user data of KindUser entries.
const (
	KindUser      byte = 1
	KindTimestamp byte = 2
	KindUserSince byte = 3
	KindVersion   byte = 4
	KindCheck     byte = 5
	keyLen             = 16
)

// Envelope is a decoded entry.
type Envelope struct {
	Kind  byte
	Key   [16]byte
	Data  []byte // user data (aliases the entry)
	TS    int64  // unix nanos for KindTimestamp
	Since uint64 // KindUserSince's since
	// Bounded: the entry carries Since (KindUserSince).
	Bounded bool
	Check   Check // KindCheck
}

// EncodeUser encodes a user entry with idempotency key key.
func EncodeUser(key [16]byte, data []byte) []byte {
	b := make([]byte, 1+keyLen+len(data))
	b[0] = KindUser
	copy(b[1:], key[:])
	copy(b[1+keyLen:], data)
	return b
}

// EncodeUserSince is EncodeUser for an entry the journal may propose more
// than once: every copy carries the same since.
func EncodeUserSince(key [16]byte, since uint64, data []byte) []byte {
	b := make([]byte, 1+keyLen+8+len(data))
	b[0] = KindUserSince
	copy(b[1:], key[:])
	binary.BigEndian.PutUint64(b[1+keyLen:], since)
	copy(b[1+keyLen+8:], data)
	return b
}

// EncodeTimestamp encodes the leader's timestamp entry.
func EncodeTimestamp(unixNano int64) []byte {
	b := make([]byte, 9)
	b[0] = KindTimestamp
	binary.BigEndian.PutUint64(b[1:], uint64(unixNano))
	return b
}

// Decode decodes a non-empty normal entry's data. A kind this code does
// not read is errs.ErrUnknownVersion (a newer format: never skipped); bytes
// that do not decode are errs.ErrMalformed.
func Decode(b []byte) (Envelope, error) {
	if len(b) == 0 {
		return Envelope{}, fmt.Errorf("%w: empty envelope", errs.ErrMalformed)
	}
	switch b[0] {
	case KindUser:
		if len(b) < 1+keyLen {
			return Envelope{}, fmt.Errorf("%w: user entry of %d bytes is shorter than its key", errs.ErrMalformed, len(b))
		}
		e := Envelope{Kind: KindUser, Data: b[1+keyLen:]}
		copy(e.Key[:], b[1:1+keyLen])
		return e, nil
	case KindUserSince:
		if len(b) < 1+keyLen+8 {
			return Envelope{}, fmt.Errorf("%w: user entry of %d bytes is shorter than its key and since", errs.ErrMalformed, len(b))
		}
		e := Envelope{Kind: KindUser, Data: b[1+keyLen+8:], Since: binary.BigEndian.Uint64(b[1+keyLen:]), Bounded: true}
		copy(e.Key[:], b[1:1+keyLen])
		return e, nil
	case KindTimestamp:
		if len(b) != 9 {
			return Envelope{}, fmt.Errorf("%w: timestamp entry of %d bytes", errs.ErrMalformed, len(b))
		}
		return Envelope{Kind: KindTimestamp, TS: int64(binary.BigEndian.Uint64(b[1:]))}, nil
	case KindVersion:
		if _, err := DecodeVersion(b); err != nil {
			return Envelope{}, err
		}
		return Envelope{Kind: KindVersion}, nil
	case KindCheck:
		c, err := DecodeCheck(b)
		if err != nil {
			return Envelope{}, err
		}
		return Envelope{Kind: KindCheck, Check: c}, nil
	}
	// A kind from a newer format: never skipped (see journal.HaltError).
	return Envelope{}, fmt.Errorf("%w: entry kind %d", errs.ErrUnknownVersion, b[0])
}
