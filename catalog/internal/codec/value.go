package codec

import "encoding/binary"

// The type bytes of encoded values, the first byte of each: the numbers of
// catalog.ValueType (a test of package catalog checks that they agree).
const (
	TypeString = 1 // payload: a str
	TypeInt    = 2 // payload: a zigzag varint
	TypeBool   = 3 // payload: one byte, 0 or 1
	TypeBytes  = 4 // payload: a str
)

// MaxValueLen is the most bytes of a string or bytes value (package
// catalog exports it as MaxValueLen).
const MaxValueLen = 1 << 20

// AppendStr appends s as a str: its uvarint length, then its bytes.
func AppendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// UvarintLen is the length of x as a uvarint.
func UvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// StrLen is the length AppendStr writes for s.
func StrLen(s string) int { return UvarintLen(uint64(len(s))) + len(s) }

// AttrIter walks the encoded attributes of a blob: uvarint count, then per
// attribute the key index (uvarint) and the value (type byte, payload), in
// increasing key-name order.
type AttrIter struct {
	b []byte
	n int
}

// NewAttrIter returns an iterator over attrs, a blob's attributes (count
// first).
func NewAttrIter(attrs []byte) AttrIter {
	c, n := binary.Uvarint(attrs)
	return AttrIter{b: attrs[n:], n: int(c)}
}

// Next returns the key index and the encoded value (type byte + payload).
func (it *AttrIter) Next() (key uint32, val []byte, ok bool) {
	if it.n == 0 {
		return 0, nil, false
	}
	it.n--
	k, n := binary.Uvarint(it.b)
	rest := it.b[n:]
	vl := ValueLen(rest)
	val = rest[:vl]
	it.b = rest[vl:]
	return uint32(k), val, true
}

// ValueLen returns the length of the encoded value at the start of b.
// Blobs are written by package catalog, so b is well formed.
func ValueLen(b []byte) int {
	switch b[0] {
	case TypeString, TypeBytes:
		l, n := binary.Uvarint(b[1:])
		return 1 + n + int(l)
	case TypeInt:
		_, n := binary.Varint(b[1:])
		return 1 + n
	case TypeBool:
		return 2
	}
	panic("catalog: corrupt attribute blob") // an internal invariant, not input
}

// Len returns the number of attributes not yet read.
func (it *AttrIter) Len() int { return it.n }

// AttrValue returns the encoded value of key in a blob's attributes.
func AttrValue(attrs []byte, key uint32) ([]byte, bool) {
	it := NewAttrIter(attrs)
	for {
		k, v, ok := it.Next()
		if !ok {
			return nil, false
		}
		if k == key {
			return v, true
		}
	}
}
