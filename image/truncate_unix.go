//go:build unix

package image

import "syscall"

// canTruncate: old images can be shredded here (see shred.go).
const canTruncate = true

// truncateFd sets the size of the open file fd.
func truncateFd(fd uintptr, size int64) error { return syscall.Ftruncate(int(fd), size) }
