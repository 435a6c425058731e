package hugepage

import "unsafe"

const (
	// Size is the size of a huge page on the platforms that have them.
	Size = 2 << 20
	// MinBytes is the smallest array Make backs with huge pages.
	MinBytes = 4 << 20
)

// Make returns a slice of n zero Ts, its length and capacity n. T must hold
// no pointers: the arrays are tables of numbers and bytes, which the
// garbage collector need not scan. Of an array of at least MinBytes, each
// whole huge page is advised; the part before the first boundary and after
// the last stays in small pages (moving the start to a boundary would
// cost up to a huge page of heap an array).
func Make[T any](n int) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	s := make([]T, n)
	if size == 0 || n < MinBytes/size {
		return s
	}
	mem := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), n*size)
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	first := alignUp(base)
	last := (base + uintptr(len(mem))) &^ (Size - 1)
	if last > first {
		advise(mem[first-base : last-base])
	}
	return s
}

// alignUp rounds p up to a huge page boundary.
func alignUp(p uintptr) uintptr { return (p + Size - 1) &^ (Size - 1) }
