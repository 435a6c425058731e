package journaltest

import (
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A disk that fills: SetFree makes GetDiskUsage report a free space (the
// in-memory filesystem reports none, and the journal's free-space guard
// then turns itself off), SetFull makes every write that needs space fail
// with ENOSPC, as a full disk's does. Reads, syncs, renames and removals
// go on.

// SetFree makes GetDiskUsage report free bytes available; a negative free
// reports no usage (vfs.ErrUnsupported, the default). The journal's guard
// reads it at Open and then every Config.SpaceCheckInterval: set it before
// the journal opens to keep the guard on.
func (fs *CrashFS) SetFree(free int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.free, fs.reportFree = free, free >= 0
}

// Free returns what SetFree set, or -1 when no usage is reported.
func (fs *CrashFS) Free() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !fs.reportFree {
		return -1
	}
	return fs.free
}

// SetFull makes writes that need space fail (true) with an error wrapping
// syscall.ENOSPC: creating a file or a directory, writing to a file,
// preallocating its blocks. False gives the space back.
func (fs *CrashFS) SetFull(full bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.full = full
}

// Full reports what SetFull set.
func (fs *CrashFS) Full() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.full
}

// GetDiskUsage implements vfs.FS: the free space SetFree set, on a disk
// of totalBytes, or the in-memory filesystem's answer.
func (fs *CrashFS) GetDiskUsage(dir string) (vfs.DiskUsage, error) {
	fs.mu.Lock()
	free, report := fs.free, fs.reportFree
	fs.mu.Unlock()
	if !report {
		return fs.MemFS.GetDiskUsage(dir)
	}
	total := uint64(max(free, totalBytes))
	return vfs.DiskUsage{AvailBytes: uint64(free), TotalBytes: total, UsedBytes: total - uint64(free)}, nil
}

// totalBytes is the size of the disk GetDiskUsage reports (or the free
// space, when SetFree set more).
const totalBytes = 1 << 40

// noSpace returns the error of a write that needs space on a full disk,
// or nil.
func (fs *CrashFS) noSpace(op, name string) error {
	if !fs.Full() {
		return nil
	}
	return &os.PathError{Op: op, Path: name, Err: syscall.ENOSPC}
}

// Write implements vfs.File; on a full disk it fails with ENOSPC.
func (f crashFile) Write(p []byte) (int, error) {
	if err := f.fs.noSpace("write", f.name); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

// WriteAt implements vfs.File; on a full disk it fails with ENOSPC.
func (f crashFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.noSpace("write", f.name); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

// Preallocate implements vfs.File; on a full disk it fails with ENOSPC.
func (f crashFile) Preallocate(off, length int64) error {
	if err := f.fs.noSpace("fallocate", f.name); err != nil {
		return err
	}
	return f.File.Preallocate(off, length)
}
