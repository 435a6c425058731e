//go:build !linux

package tmpfs

import "testing"

// Mount skips t: mounting a tmpfs is Linux only.
func Mount(t testing.TB, size int64) string {
	t.Skip("a tmpfs mount needs Linux (and root): the full-disk test needs a real small filesystem")
	return ""
}

// Fill is not reached off Linux (Mount skipped).
func Fill(t testing.TB, path string) int64 {
	t.Skip("a tmpfs mount needs Linux")
	return 0
}
