//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package image

import (
	"errors"
	"os"
	"syscall"
)

// tryFlock takes an advisory lock on the open file fd, shared or exclusive,
// without waiting, held until fd is closed. It reports busy when another
// open of the file (in any process) holds a conflicting lock. A filesystem
// without advisory locks reports not busy: nothing is protected there.
//
// Readers outside the Store (ReadFile, ReadHeader: metactl, in its own
// process) hold a shared lock while they read an image; the shredder holds
// an exclusive one on each file it truncates. So the shredder never
// truncates a file another process reads (it removes it at once, as it
// does a file the Store itself reads), and a reader that opened an image
// the shredder is truncating knows it is being removed.
func tryFlock(fd uintptr, exclusive bool) (busy bool) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(fd), how|syscall.LOCK_NB)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
}

// sameFile reports whether a and b describe the same file (device and
// inode); true when they do not tell.
func sameFile(a, b os.FileInfo) bool {
	sa, okA := a.Sys().(*syscall.Stat_t)
	sb, okB := b.Sys().(*syscall.Stat_t)
	if !okA || !okB {
		return true
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}
