//go:build unix

package main

import (
	"io/fs"
	"syscall"
)

// occupied is the bytes of the blocks fi's file holds.
func occupied(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
