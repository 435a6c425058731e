package heartbeat

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"

	"github.com/google/uuid"

	"github.com/metatree/metatree/internal/operr"
)

// Epoch identifies one start of one process: a UUID drawn when the
// process starts (NewEpoch). Its random bits make it unique whatever the
// clock does, so a restart always yields a different epoch, even when the
// clock moved backwards; its leading bits are the start time, which
// orders two epochs of one member (StartedBefore).
//
// Two flavours exist. A real epoch is a version-7 UUID that a process drew
// for itself. A temporary epoch (Temporary reports true) is the one the
// cluster publishes for a member it declared dead; it carries version 8 and
// so can never equal a real epoch. The zero Epoch means "unknown": no
// answer has been recorded yet, and nothing is ever cancelled because of it.
//
// Epoch is a comparable value; the zero value is valid (unknown).
type Epoch [16]byte

// NewEpoch draws a fresh epoch: a version-7 UUID, the start time in
// milliseconds and a sub-millisecond sequence (increasing within the
// process) followed by random bits. Call it once per process start.
func NewEpoch() Epoch { return Epoch(uuid.Must(uuid.NewV7())) }

// StartedBefore reports whether e and o are both real epochs drawn by
// NewEpoch (version 7) and e's start time is before o's. Of one member,
// whose processes run one at a time, e's process has then ended by the
// time o's runs. Epochs of other versions (temporary ones, the version-4
// epochs of older releases) have no order: StartedBefore is false.
//
// The order is the clocks': a member whose clock stepped back between two
// starts by more than the time between them has its newer epoch ordered
// first.
func (e Epoch) StartedBefore(o Epoch) bool {
	if !e.Ordered() || !o.Ordered() {
		return false
	}
	// Bytes 0-5 are the milliseconds, 6-7 the version and the sequence.
	return bytes.Compare(e[:8], o[:8]) < 0
}

// Ordered reports whether e carries its start time (a real epoch drawn
// by NewEpoch), which StartedBefore compares.
func (e Epoch) Ordered() bool { return e.version() == 7 }

func (e Epoch) version() byte { return e[6] >> 4 }

// ParseEpoch parses the canonical text form (as printed by String). The
// empty string parses to the zero epoch.
func ParseEpoch(s string) (Epoch, error) {
	if s == "" {
		return Epoch{}, nil
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return Epoch{}, operr.Errorf("heartbeat: bad epoch %q: %w", s, err)
	}
	return Epoch(u), nil
}

// IsZero reports whether e is the unknown epoch.
func (e Epoch) IsZero() bool { return e == Epoch{} }

// Temporary reports whether e is a temporary epoch standing for a member
// that was declared dead (see TemporaryEpoch).
func (e Epoch) Temporary() bool { return !e.IsZero() && e.version() == 8 }

// String returns the canonical UUID text form, or "" for the zero epoch.
func (e Epoch) String() string {
	if e.IsZero() {
		return ""
	}
	return uuid.UUID(e).String()
}

// MarshalText implements encoding.TextMarshaler.
func (e Epoch) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (e *Epoch) UnmarshalText(b []byte) error {
	v, err := ParseEpoch(string(b))
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// TemporaryEpoch returns the temporary epoch published for a member whose
// last real epoch was last and which was declared dead at generation gen.
// It is a pure function of journaled data, so every frontend and every
// leader computes the same one: a leader change never makes a dead member
// look as if it restarted again. It never equals a real epoch.
func TemporaryEpoch(last Epoch, gen uint64) Epoch {
	var buf [24]byte
	copy(buf[:16], last[:])
	binary.BigEndian.PutUint64(buf[16:], gen)
	sum := sha256.Sum256(buf[:])
	var e Epoch
	copy(e[:], sum[:16])
	e[6] = e[6]&0x0f | 0x80 // version 8: "custom", never produced by NewEpoch
	e[8] = e[8]&0x3f | 0x80 // RFC 4122 variant
	return e
}
