package envelope

import (
	"bytes"
	"errors"
	"testing"

	"github.com/metatree/metatree/journal/internal/errs"
)

// FuzzDecode feeds arbitrary bytes to the envelope decoder: it either
// decodes or fails with errs.errs.ErrMalformed or, for a kind or a check
// operation this code does not read, errs.errs.ErrUnknownVersion: never a
// panic, never a silent skip. An envelope that decodes encodes back to
// the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(EncodeUser([16]byte{1, 2}, []byte("data")))
	f.Add(EncodeUserSince([16]byte{3}, 41, []byte("data")))
	f.Add(EncodeTimestamp(1_700_000_000_000_000_000))
	f.Add(EncodeVersion(2))
	f.Add(EncodeCheckMark(1))
	f.Add(EncodeCheckMark(2))
	f.Add([]byte{KindCheck, CheckMarkOf, 1}) // format 1 has the plain mark
	f.Add(EncodeCheckClear())
	f.Add(EncodeCheckReport(7, 2, bytes.Repeat([]byte{0xab}, 32)))
	f.Add([]byte{KindCheck, 9})                    // an operation of a newer format
	f.Add([]byte{KindCheck, CheckReport, 0, 0, 0}) // a report cut short
	f.Add([]byte{})
	f.Add([]byte{9, 0, 0, 0, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		if env, err := Decode(b); err != nil {
			unknown := len(b) > 0 && (b[0] < KindUser || b[0] > KindCheck) ||
				len(b) > 1 && b[0] == KindCheck && (b[1] < CheckMark || b[1] > CheckMarkOf)
			if errors.Is(err, errs.ErrUnknownVersion) != unknown || errors.Is(err, errs.ErrMalformed) == unknown {
				t.Fatalf("envelope %x: %v", b, err)
			}
		} else {
			var again []byte
			switch env.Kind {
			case KindUser:
				if env.Bounded {
					again = EncodeUserSince(env.Key, env.Since, env.Data)
				} else {
					again = EncodeUser(env.Key, env.Data)
				}
			case KindTimestamp:
				again = EncodeTimestamp(env.TS)
			case KindVersion:
				v, err := DecodeVersion(b)
				if err != nil {
					t.Fatalf("version entry decoded as an envelope but not as a version: %v", err)
				}
				again = EncodeVersion(v)
			case KindCheck:
				switch c := env.Check; c.Op {
				case CheckMark:
					again = EncodeCheckMark(c.Format)
				case CheckReport:
					again = EncodeCheckReport(c.Mark, c.From, c.Digest)
				case CheckClear:
					again = EncodeCheckClear()
				}
			default:
				t.Fatalf("envelope of kind %d decoded", env.Kind)
			}
			if !bytes.Equal(again, b) {
				t.Fatalf("envelope %x re-encodes as %x", b, again)
			}
		}
	})
}
