package layout

import (
	"encoding/binary"
	"unsafe"
)

// CommonPrefix returns the length of the longest common prefix of a and b,
// comparing eight bytes at a time.
func CommonPrefix(a, b string) int {
	n := min(len(a), len(b))
	ab, bb := UnsafeBytes(a), UnsafeBytes(b)
	i := 0
	for i+8 <= n && binary.LittleEndian.Uint64(ab[i:]) == binary.LittleEndian.Uint64(bb[i:]) {
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// UnsafeBytes views a string's bytes without copying; the result must not be
// modified.
func UnsafeBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// Limits of names and paths, which resolve checks as it reads a path;
// package catalog exports them as its own.
const (
	MaxNameLen = 255     // bytes in a node name, kind or attribute key
	MaxPathLen = 1 << 16 // bytes in a path
)
