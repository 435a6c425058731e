package envelope

import (
	"encoding/binary"
	"fmt"

	"github.com/metatree/metatree/journal/internal/errs"
)

// The consistency checks' entries (journal's check.go runs the checks):
//
//	KindCheck mark:           [5][1]
//	KindCheck report:         [5][2][8-byte big-endian mark index][8-byte big-endian member id][digest...]
//	KindCheck clear:          [5][3]
//	KindCheck mark of format: [5][4][digest format, 2 to 255]
//
// A mark of format 1 is the plain mark.
const (
	CheckMark   byte = 1
	CheckReport byte = 2
	CheckClear  byte = 3
	CheckMarkOf byte = 4

	// MaxDigestLen bounds a report's digest.
	MaxDigestLen = 64
)

// Check is a decoded KindCheck entry.
type Check struct {
	Op     byte   // CheckMark (of any format), CheckReport or CheckClear
	Format byte   // mark: the digest format it names (1 for a plain mark)
	Mark   uint64 // report: the mark's index
	From   uint64 // report: the reporting member
	Digest []byte // report: its digest at mark (aliases the entry)
}

// EncodeCheckMark encodes a mark naming digest format (a plain mark for
// format 1).
func EncodeCheckMark(format byte) []byte {
	if format <= 1 {
		return []byte{KindCheck, CheckMark}
	}
	return []byte{KindCheck, CheckMarkOf, format}
}

// EncodeCheckClear encodes the entry that clears the corruption alarm.
func EncodeCheckClear() []byte { return []byte{KindCheck, CheckClear} }

// EncodeCheckReport encodes member from's digest at the mark at index mark.
func EncodeCheckReport(mark, from uint64, digest []byte) []byte {
	b := make([]byte, 0, 2+16+len(digest))
	b = append(b, KindCheck, CheckReport)
	b = binary.BigEndian.AppendUint64(b, mark)
	b = binary.BigEndian.AppendUint64(b, from)
	return append(b, digest...)
}

// DecodeCheck decodes a KindCheck entry. An operation this code does not
// know is errs.ErrUnknownVersion (a newer format: never skipped).
func DecodeCheck(b []byte) (Check, error) {
	if len(b) < 2 || b[0] != KindCheck {
		return Check{}, fmt.Errorf("%w: check entry of %d bytes", errs.ErrMalformed, len(b))
	}
	switch b[1] {
	case CheckMark:
		if len(b) != 2 {
			return Check{}, fmt.Errorf("%w: check mark of %d bytes", errs.ErrMalformed, len(b))
		}
		return Check{Op: CheckMark, Format: 1}, nil
	case CheckMarkOf:
		if len(b) != 3 || b[2] < 2 {
			return Check{}, fmt.Errorf("%w: check mark of a format: %d bytes (want 3, of a format from 2)", errs.ErrMalformed, len(b))
		}
		return Check{Op: CheckMark, Format: b[2]}, nil
	case CheckClear:
		if len(b) != 2 {
			return Check{}, fmt.Errorf("%w: check clear of %d bytes", errs.ErrMalformed, len(b))
		}
		return Check{Op: CheckClear}, nil
	case CheckReport:
		n := len(b) - 18
		if n < 1 || n > MaxDigestLen {
			return Check{}, fmt.Errorf("%w: check report of %d bytes (a digest of 1 to %d bytes)", errs.ErrMalformed, len(b), MaxDigestLen)
		}
		c := Check{Op: CheckReport, Mark: binary.BigEndian.Uint64(b[2:]), From: binary.BigEndian.Uint64(b[10:]), Digest: b[18:]}
		if c.Mark == 0 || c.From == 0 {
			return Check{}, fmt.Errorf("%w: check report of mark %d from member %d", errs.ErrMalformed, c.Mark, c.From)
		}
		return c, nil
	}
	return Check{}, fmt.Errorf("%w: check entry operation %d", errs.ErrUnknownVersion, b[1])
}
