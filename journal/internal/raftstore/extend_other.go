//go:build !linux

package raftstore

import "github.com/cockroachdb/pebble/v2/vfs"

// extendFile allocates f's blocks in [offset, offset+length) as the
// filesystem allows (see the Linux version).
func extendFile(f vfs.File, offset, length int64) error {
	return f.Preallocate(offset, length)
}
