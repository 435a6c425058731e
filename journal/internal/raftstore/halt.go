package raftstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrHalted marks the error of a store that stopped writing after a storage
// failure: a write, fsync, create or rename under its directory failed, or
// Pebble reported a fatal error. A failed fsync may have dropped the dirty
// pages it was meant to persist, so nothing written since the last
// successful one can be trusted, and retrying the fsync would report
// success for data that is gone. The store refuses every write from then
// on; reads of what it acknowledged before go on. Only a restart, which
// recovers from what is durable, clears it. Check with errors.Is.
var ErrHalted = errors.New("raftstore: halted by a storage failure")

// IOError is a failed filesystem operation on one file, the cause a halted
// store reports.
type IOError struct {
	Op   string // "write", "sync", "create", "rename", ...
	Path string
	Err  error
}

func (e *IOError) Error() string { return e.Op + " " + e.Path + ": " + e.Err.Error() }
func (e *IOError) Unwrap() error { return e.Err }

// halt holds the first storage failure of a store. It is safe for
// concurrent use: Pebble's background goroutines record into it.
type halt struct {
	err  atomic.Pointer[error]
	done chan struct{} // closed by the first record
}

func newHalt() *halt { return &halt{done: make(chan struct{})} }

// record keeps cause as the reason for halting, unless one is kept already.
func (h *halt) record(cause error) {
	err := fmt.Errorf("%w: %w", ErrHalted, cause)
	if h.err.CompareAndSwap(nil, &err) {
		close(h.done)
	}
}

// check returns the halt error, or nil while the store may write.
func (h *halt) check() error {
	if p := h.err.Load(); p != nil {
		return *p
	}
	return nil
}

// haltFS wraps the store's filesystem so that any failed mutating operation
// (a write, fsync, preallocation, create, link or rename, whether from the
// WAL, a flush, a compaction or the MANIFEST) halts the store, with the
// operation and the file named. Pebble does not always surface these: a
// failed WAL fsync reaches it inside the commit pipeline, which it then
// treats as fatal, and a failed flush is retried in the background.
type haltFS struct {
	vfs.FS
	h *halt
}

func (f haltFS) fail(op, path string, err error) error {
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrExist) {
		f.h.record(&IOError{Op: op, Path: path, Err: err})
	}
	return err
}

func (f haltFS) wrap(op, name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, f.fail(op, name, err)
	}
	return haltFile{File: file, fs: f, path: name}, nil
}

func (f haltFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, c)
	return f.wrap("create", name, file, err)
}

func (f haltFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.OpenReadWrite(name, c, opts...)
	return f.wrap("open for write", name, file, err)
}

func (f haltFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.ReuseForWrite(oldname, newname, c)
	return f.wrap("reuse for write", newname, file, err)
}

// OpenDir wraps the directory too: Pebble fsyncs it after creating and
// renaming files, and a failed directory fsync loses those entries.
func (f haltFS) OpenDir(name string) (vfs.File, error) {
	file, err := f.FS.OpenDir(name)
	if err != nil {
		return nil, err // opening is a read
	}
	return haltFile{File: file, fs: f, path: name}, nil
}

func (f haltFS) Link(oldname, newname string) error {
	return f.fail("link", newname, f.FS.Link(oldname, newname))
}

func (f haltFS) Rename(oldname, newname string) error {
	return f.fail("rename", oldname+" to "+newname, f.FS.Rename(oldname, newname))
}

func (f haltFS) MkdirAll(dir string, perm os.FileMode) error {
	return f.fail("mkdir", dir, f.FS.MkdirAll(dir, perm))
}

func (f haltFS) Unwrap() vfs.FS { return f.FS }

type haltFile struct {
	vfs.File
	fs   haltFS
	path string
}

func (f haltFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.fs.fail("write", f.path, err)
}

func (f haltFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.fs.fail("write", f.path, err)
}

func (f haltFile) Preallocate(offset, length int64) error {
	return f.fs.fail("preallocate", f.path, f.File.Preallocate(offset, length))
}

func (f haltFile) Sync() error { return f.fs.fail("sync", f.path, f.File.Sync()) }

func (f haltFile) SyncData() error { return f.fs.fail("sync", f.path, f.File.SyncData()) }

func (f haltFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.fs.fail("sync", f.path, err)
}
