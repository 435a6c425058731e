package catalog

import (
	"encoding/binary"
	"unsafe"
)

// Node is a copy of one node of the tree; it is safe to keep and to modify
// (except the nodes in watch events, which are shared between watchers and
// must be treated as read-only).
type Node struct {
	ID       uint64 // assigned at apply time from the tree's counter; the root is 1
	Parent   uint64 // the parent's id; 0 for the root
	Name     string // unique among its siblings; "" for the root
	Path     string // "/db1/orders"; "/" for the root
	Kind     string // "" for the root
	Attrs    map[string]Value
	Created  uint64 // log index of the batch that created it
	Modified uint64 // log index of the batch that last changed it (attributes, name or parent)
}

// commonPrefix returns the length of the longest common prefix of a and b,
// comparing eight bytes at a time.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	ab, bb := unsafeBytes(a), unsafeBytes(b)
	i := 0
	for i+8 <= n && binary.LittleEndian.Uint64(ab[i:]) == binary.LittleEndian.Uint64(bb[i:]) {
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// unsafeBytes views a string's bytes without copying; the result must not be
// modified.
func unsafeBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
