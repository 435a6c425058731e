package raftstore

import (
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// extendFile allocates f's blocks in [offset, offset+length) and extends
// its size to cover them (fallocate without FALLOC_FL_KEEP_SIZE): the
// range reads as zeros until written. A file with no descriptor (an
// in-memory filesystem) gets its own Preallocate.
func extendFile(f vfs.File, offset, length int64) error {
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return f.Preallocate(offset, length)
	}
	return syscall.Fallocate(int(fd), 0, offset, length)
}
