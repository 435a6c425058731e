package codec

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// The reader takes each primitive in its shortest form only, names what it
// read and the byte offset in its error, and keeps the first error.
func TestReaderRejectsWhatIsNotCanonical(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
		read func(d *Reader)
		want string
	}{
		{"overlong uvarint", []byte{0x81, 0x00}, func(d *Reader) { d.Uvarint("count") }, "at byte 0: overlong varint for count"},
		{"overlong varint", []byte{0x80, 0x80, 0x00}, func(d *Reader) { d.Varint("int") }, "at byte 0: overlong varint for int"},
		{"bad uvarint", []byte{0x80}, func(d *Reader) { d.Uvarint("count") }, "at byte 0: bad varint for count"},
		{"truncated byte", nil, func(d *Reader) { d.Byte("type") }, "at byte 0: truncated before type"},
		{"truncated str", []byte{5, 'a', 'b'}, func(d *Reader) { d.Str("name", 10) }, "truncated name (5 bytes, 2 left)"},
		{"long str", []byte{5, 'a', 'b', 'c', 'd', 'e'}, func(d *Reader) { d.Str("name", 4) }, "name of 5 bytes exceeds 4"},
		{"first error kept", []byte{0x80}, func(d *Reader) { d.Uvarint("first"); d.Byte("second") }, "bad varint for first"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Reader{Data: c.data}
			c.read(&d)
			if !errors.Is(d.Err, ErrMalformed) || !strings.Contains(d.Err.Error(), c.want) {
				t.Fatalf("error %v, want ErrMalformed with %q", d.Err, c.want)
			}
		})
	}
}

// Values written with AppendStr and binary's appenders read back through
// the Reader, as copies or as views, and UvarintAt agrees with Uvarint.
func TestReaderReadsWhatIsAppended(t *testing.T) {
	var b []byte
	b = binary.AppendUvarint(b, 300)
	b = AppendStr(b, "orders")
	b = binary.AppendVarint(b, -7)
	b = append(b, 1)
	b = AppendStr(b, strings.Repeat("x", 200))
	for _, view := range []bool{false, true} {
		d := Reader{Data: b, View: view}
		if v := d.Uvarint("n"); v != 300 {
			t.Fatalf("uvarint %d", v)
		}
		if v, off := UvarintAt(b, 0); v != 300 || off != d.Off {
			t.Fatalf("UvarintAt: %d at %d, the reader %d at %d", v, off, 300, d.Off)
		}
		if s := d.Str("name", 255); s != "orders" {
			t.Fatalf("str %q", s)
		}
		if v := d.Varint("i"); v != -7 {
			t.Fatalf("varint %d", v)
		}
		if v := d.Byte("b"); v != 1 {
			t.Fatalf("byte %d", v)
		}
		if s := d.Str("long", 255); s != strings.Repeat("x", 200) {
			t.Fatalf("long str of %d bytes", len(s))
		}
		if d.Err != nil || d.Off != len(b) {
			t.Fatalf("after the reads: %v at %d of %d", d.Err, d.Off, len(b))
		}
	}
	if _, off := UvarintAt([]byte{0x81, 0x00}, 0); off != -1 {
		t.Fatalf("UvarintAt took an overlong varint (offset %d)", off)
	}
}

// UvarintLen is the length binary.AppendUvarint writes.
func TestUvarintLen(t *testing.T) {
	for _, x := range []uint64{0, 1, 127, 128, 16383, 16384, 1 << 35, 1<<64 - 1} {
		if got, want := UvarintLen(x), len(binary.AppendUvarint(nil, x)); got != want {
			t.Fatalf("UvarintLen(%d) = %d, want %d", x, got, want)
		}
	}
}

// An attribute blob reads back key by key, each value whole, and
// AttrValue finds a key's value or reports it absent.
func TestAttrIter(t *testing.T) {
	b := binary.AppendUvarint(nil, 4)
	vals := [][]byte{
		AppendStr([]byte{TypeString}, "ssd"),
		binary.AppendVarint([]byte{TypeInt}, -300),
		{TypeBool, 1},
		AppendStr([]byte{TypeBytes}, "\x00\xff"),
	}
	for k, v := range vals {
		b = binary.AppendUvarint(b, uint64(2*k+1))
		b = append(b, v...)
	}
	it := NewAttrIter(b)
	for k, want := range vals {
		if it.Len() != len(vals)-k {
			t.Fatalf("Len %d before attribute %d of %d", it.Len(), k, len(vals))
		}
		key, v, ok := it.Next()
		if !ok || key != uint32(2*k+1) || string(v) != string(want) {
			t.Fatalf("attribute %d: key %d value %x %v, want key %d value %x", k, key, v, ok, 2*k+1, want)
		}
	}
	if _, _, ok := it.Next(); ok {
		t.Fatal("Next went past the last attribute")
	}
	if v, ok := AttrValue(b, 5); !ok || string(v) != string(vals[2]) {
		t.Fatalf("AttrValue(5) = %x %v", v, ok)
	}
	if _, ok := AttrValue(b, 4); ok {
		t.Fatal("AttrValue found a key the blob does not hold")
	}
}

// Value reads each type's payload, and fails on a bool other than 0 or 1
// and on an unknown type, which it returns as type 0.
func TestReaderValue(t *testing.T) {
	var b []byte
	b = AppendStr(append(b, TypeString), "ssd")
	b = binary.AppendVarint(append(b, TypeInt), -300)
	b = append(b, TypeBool, 1)
	b = AppendStr(append(b, TypeBytes), "\x00\xff")
	d := Reader{Data: b}
	for _, want := range []struct {
		typ byte
		s   string
		i   int64
	}{{TypeString, "ssd", 0}, {TypeInt, "", -300}, {TypeBool, "", 1}, {TypeBytes, "\x00\xff", 0}} {
		if typ, s, i := d.Value("v"); typ != want.typ || s != want.s || i != want.i {
			t.Fatalf("Value = %d %q %d, want %d %q %d", typ, s, i, want.typ, want.s, want.i)
		}
	}
	if d.Err != nil || d.Off != len(b) {
		t.Fatalf("after the values: %v at %d of %d", d.Err, d.Off, len(b))
	}
	for _, c := range []struct {
		data []byte
		want string
	}{{[]byte{TypeBool, 2}, "bool v is 2"}, {[]byte{9}, "unknown value type 9 for v"}} {
		d := Reader{Data: c.data}
		if typ, _, _ := d.Value("v"); !errors.Is(d.Err, ErrMalformed) || !strings.Contains(d.Err.Error(), c.want) || c.data[0] == 9 && typ != 0 {
			t.Fatalf("% x: type %d, error %v, want ErrMalformed with %q", c.data, typ, d.Err, c.want)
		}
	}
}
