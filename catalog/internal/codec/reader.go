package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/metatree/metatree/internal/formatversion"
)

var (
	// ErrMalformed: encoded bytes cannot be decoded. Package catalog
	// exports it as its own ErrMalformed.
	ErrMalformed = errors.New("catalog: malformed batch")
	// ErrUnknownVersion: a batch or image has a format version this code
	// does not know. Package catalog exports it as its own
	// ErrUnknownVersion.
	ErrUnknownVersion = fmt.Errorf("catalog: %w", formatversion.ErrUnknown)
)

// Reader decodes the primitives of the catalog's encodings from Data,
// from Off on. The first failure is kept in Err (ErrMalformed, naming what
// was read and the byte offset), and every read after it returns a zero
// value, so that a caller checks Err once after a run of reads.
type Reader struct {
	Data []byte
	Off  int
	// View makes Str return strings that point into Data (no copies),
	// which must not outlive it.
	View bool
	Err  error
}

// Fail records the first error: ErrMalformed at the current offset.
func (d *Reader) Fail(format string, args ...any) {
	if d.Err == nil {
		d.Err = fmt.Errorf("%w: at byte %d: %s", ErrMalformed, d.Off, fmt.Sprintf(format, args...))
	}
}

// Uvarint reads a uvarint in its shortest form; what names it in errors.
func (d *Reader) Uvarint(what string) uint64 {
	if d.Err != nil {
		return 0
	}
	if d.Off < len(d.Data) && d.Data[d.Off] < 0x80 { // one byte: most lengths
		v := d.Data[d.Off]
		d.Off++
		return uint64(v)
	}
	v, n := binary.Uvarint(d.Data[d.Off:])
	if !d.took(n, what) {
		return 0
	}
	return v
}

// Varint reads a zigzag varint in its shortest form.
func (d *Reader) Varint(what string) int64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Varint(d.Data[d.Off:])
	if !d.took(n, what) {
		return 0
	}
	return v
}

// took moves past the varint of n bytes at Off that binary.Uvarint or
// binary.Varint read (n <= 0: none there); it fails, and reports false,
// when there is none or it is overlong.
func (d *Reader) took(n int, what string) bool {
	if n <= 0 {
		d.Fail("bad varint for %s", what)
		return false
	}
	if Overlong(d.Data[d.Off : d.Off+n]) {
		d.Fail("overlong varint for %s", what)
		return false
	}
	d.Off += n
	return true
}

// Byte reads one byte.
func (d *Reader) Byte(what string) byte {
	if d.Err != nil {
		return 0
	}
	if d.Off >= len(d.Data) {
		d.Fail("truncated before %s", what)
		return 0
	}
	b := d.Data[d.Off]
	d.Off++
	return b
}

// Str reads a string (uvarint length, then its bytes) of at most max
// bytes: a copy, or a view of Data when View is set.
func (d *Reader) Str(what string, max int) string {
	// Fast path: a short string with a one-byte length.
	if d.Err == nil && d.Off < len(d.Data) {
		if n := int(d.Data[d.Off]); n < 0x80 && n <= max && d.Off+1+n <= len(d.Data) {
			start := d.Off + 1
			d.Off = start + n
			if n == 0 {
				return ""
			}
			if d.View {
				return unsafe.String(&d.Data[start], n)
			}
			return string(d.Data[start:d.Off])
		}
	}
	n := d.Uvarint(what)
	if d.Err != nil {
		return ""
	}
	if n > uint64(max) {
		d.Fail("%s of %d bytes exceeds %d", what, n, max)
		return ""
	}
	if n > uint64(len(d.Data)-d.Off) {
		d.Fail("truncated %s (%d bytes, %d left)", what, n, len(d.Data)-d.Off)
		return ""
	}
	b := d.Data[d.Off : d.Off+int(n)]
	d.Off += int(n)
	if n == 0 {
		return ""
	}
	if d.View {
		return unsafe.String(&b[0], len(b))
	}
	return string(b)
}

// Value reads a value (a type byte and its payload, strings and bytes of
// at most MaxValueLen) and returns its type, and its payload as a string
// (TypeString, TypeBytes) or an integer (TypeInt, TypeBool). An unknown
// type fails and returns type 0.
func (d *Reader) Value(what string) (typ byte, s string, i int64) {
	t := d.Byte(what)
	switch t {
	case TypeString, TypeBytes:
		return t, d.Str(what, MaxValueLen), 0
	case TypeInt:
		return t, "", d.Varint(what)
	case TypeBool:
		b := d.Byte(what)
		if b > 1 {
			d.Fail("bool %s is %d", what, b)
		}
		return t, "", int64(b)
	}
	d.Fail("unknown value type %d for %s", t, what)
	return 0, "", 0
}

// Overlong reports whether the varint b (as binary.Uvarint or
// binary.Varint read it) has more bytes than its value needs: a last byte
// of zero. Encoding writes the shortest form, and only the shortest is
// accepted, so that one batch or value has one encoding (values are kept,
// and indexed, in their encoded form).
func Overlong(b []byte) bool { return len(b) > 1 && b[len(b)-1] == 0 }

// UvarintAt is Reader.Uvarint of p[off:]: the value and the offset
// after it, or -1 when there is no valid varint there (overlong included).
func UvarintAt(p []byte, off int) (uint64, int) {
	if uint(off) >= uint(len(p)) {
		return 0, -1
	}
	v, n := binary.Uvarint(p[off:])
	if n <= 0 || Overlong(p[off:off+n]) {
		return 0, -1
	}
	return v, off + n
}
