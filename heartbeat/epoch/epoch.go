package epoch

import (
	"bytes"

	"github.com/google/uuid"

	"github.com/metatree/metatree/internal/operr"
)

// Epoch identifies one start of one process: a UUID drawn when the
// process starts (New). Its random bits make it unique whatever the
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

// New draws a fresh epoch: a version-7 UUID, the start time in
// milliseconds and a sub-millisecond sequence (increasing within the
// process) followed by random bits. Call it once per process start.
func New() Epoch { return Epoch(uuid.Must(uuid.NewV7())) }

// StartedBefore reports whether e and o are both real epochs drawn by
// New (version 7) and e's start time is before o's. Of one member,
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
// by New), which StartedBefore compares.
func (e Epoch) Ordered() bool { return e.version() == 7 }

func (e Epoch) version() byte { return e[6] >> 4 }

// Parse parses the canonical text form (as printed by String). The
// empty string parses to the zero epoch.
func Parse(s string) (Epoch, error) {
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
// that was declared dead (the monitor derives it from the member's last real epoch and the
// generation of its death, so every frontend publishes the same one).
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
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*e = v
	return nil
}
