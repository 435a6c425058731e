package tmpfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes on a new directory under t.TempDir,
// unmounted when t ends, and returns the directory. It skips t when the
// process is not root (mount(2) needs CAP_SYS_ADMIN).
func Mount(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (CI runs as root): the full-disk test needs a real small filesystem")
	}
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file at path until the filesystem is full, and returns
// how many bytes it holds.
func Fill(t testing.TB, path string) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		m, err := f.Write(buf)
		n += int64(m)
		if err != nil {
			if !errorsIsENOSPC(err) {
				t.Fatalf("fill %s: %v", path, err)
			}
			return n
		}
	}
}

func errorsIsENOSPC(err error) bool { return errors.Is(err, syscall.ENOSPC) }
