package raftstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// haltFS wraps the store's filesystem so that any failed mutating operation
// (a write, fsync, create, link or rename, whether from the
// WAL, a flush, a compaction or the MANIFEST) halts the store, with the
// operation and the file named. Pebble does not always surface these: a
// failed WAL fsync reaches it inside the commit pipeline, which it then
// treats as fatal, and a failed flush is retried in the background.
//
// Once Pebble is open (halt.live), two more rules keep the host alive and
// the data dir recoverable:
//
//   - A failure Pebble would panic on is reported to Pebble as a success:
//     a failed create, write, sync or close of a WAL file, and a failed
//     directory fsync. DB.rotateWAL panics when closing the previous WAL
//     or creating the next one fails (the WAL manager fsyncs the directory
//     in Create), and DB.commitWrite panics when the WAL writer holds an
//     earlier error. rotateWAL panics with DB.mu released, so the deferred
//     Unlock of its caller turns the panic into the runtime's fatal
//     "unlock of unlocked mutex", which no recover stops. The lie is safe:
//     the store acknowledges nothing once halted (every write checks the
//     halt after Pebble returns), and what it acknowledged before was made
//     durable by an fsync that succeeded.
//   - After the halt, the filesystem changes nothing more on disk, so the
//     data dir stays as the failure left it, which a restart recovers as it
//     would a crash at that moment: WAL writes are discarded (and reported
//     done), directory fsyncs are skipped (nothing else changes the
//     directory), removes fail, writes and fsyncs of other open files fail,
//     and creating, renaming or linking a file parks until the store closes
//     and then fails. Failing that last group at once would spin: Pebble
//     schedules a failed flush again immediately, without backoff
//     (DB.flush), for as long as the node keeps serving reads.
type haltFS struct {
	vfs.FS
	h *halt
}

// isWAL reports whether name is a Pebble WAL file (000123.log, or
// 000123-001.log for a failover segment).
func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

// fail records a failed operation; expected answers (a file that does not
// exist, or already does) are not failures.
func (f haltFS) fail(op, path string, err error) error {
	if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrExist) {
		f.h.record(&IOError{Op: op, Path: path, Err: err})
	}
	return err
}

// absorb records a failure Pebble would panic on and, once the store is
// live, reports success to Pebble instead.
func (f haltFS) absorb(op, path string, err error) error {
	if err == nil {
		return nil
	}
	if !f.h.live.Load() {
		return f.fail(op, path, err)
	}
	f.h.record(&IOError{Op: op, Path: path, Err: err})
	return nil
}

// frozen reports whether the disk is frozen: the store is live and halted.
func (f haltFS) frozen() bool { return f.h.live.Load() && f.h.check() != nil }

// park holds a call that would change the disk of a frozen store until the
// store closes, then fails it with the halt error.
func (f haltFS) park() error {
	<-f.h.closing
	return f.h.check()
}

func (f haltFS) create(op, name string, open func() (vfs.File, error)) (vfs.File, error) {
	wal := isWAL(name)
	if f.frozen() {
		if wal {
			return discardFile{name: name}, nil
		}
		return nil, f.park()
	}
	file, err := open()
	if err != nil {
		if wal && f.h.live.Load() {
			f.h.record(&IOError{Op: op, Path: name, Err: err})
			return discardFile{name: name}, nil
		}
		return nil, f.fail(op, name, err)
	}
	hf := haltFile{File: file, fs: f, path: name, wal: wal}
	if wal {
		hf.alloc = &preallocation{}
	}
	return hf, nil
}

func (f haltFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return f.create("create", name, func() (vfs.File, error) { return f.FS.Create(name, c) })
}

func (f haltFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return f.create("open for write", name, func() (vfs.File, error) { return f.FS.OpenReadWrite(name, c, opts...) })
}

func (f haltFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return f.create("reuse for write", newname, func() (vfs.File, error) { return f.FS.ReuseForWrite(oldname, newname, c) })
}

// OpenDir wraps the directory too: Pebble fsyncs it after creating and
// renaming files, and a failed directory fsync loses those entries.
func (f haltFS) OpenDir(name string) (vfs.File, error) {
	file, err := f.FS.OpenDir(name)
	if err != nil {
		return nil, err // opening is a read
	}
	return haltFile{File: file, fs: f, path: name, dir: true}, nil
}

func (f haltFS) Link(oldname, newname string) error {
	if f.frozen() {
		return f.park()
	}
	return f.fail("link", newname, f.FS.Link(oldname, newname))
}

func (f haltFS) Rename(oldname, newname string) error {
	if f.frozen() {
		return f.park()
	}
	return f.fail("rename", oldname+" to "+newname, f.FS.Rename(oldname, newname))
}

func (f haltFS) MkdirAll(dir string, perm os.FileMode) error {
	if f.frozen() {
		return f.park()
	}
	return f.fail("mkdir", dir, f.FS.MkdirAll(dir, perm))
}

// Remove and RemoveAll fail on a frozen disk: Pebble logs a failed
// deletion of an obsolete file and goes on.
func (f haltFS) Remove(name string) error {
	if f.frozen() {
		return f.h.check()
	}
	return f.FS.Remove(name)
}

func (f haltFS) RemoveAll(name string) error {
	if f.frozen() {
		return f.h.check()
	}
	return f.FS.RemoveAll(name)
}

func (f haltFS) Unwrap() vfs.FS { return f.FS }

// haltFile is a file (or directory) of a haltFS.
type haltFile struct {
	vfs.File
	fs   haltFS
	path string
	wal  bool // a WAL file: failures are absorbed, writes discarded once frozen
	dir  bool // a directory: a failed fsync is absorbed, skipped once frozen
	// alloc allocates a WAL's blocks a step ahead of its writes (nil: the
	// file is no WAL, and Preallocate allocates what it is asked).
	alloc *preallocation
}

// mutate runs a write or fsync of f under haltFS's rules.
func (f haltFile) mutate(op string, do func() error) error {
	absorbed := f.wal || f.dir
	if f.fs.frozen() {
		if absorbed {
			return nil
		}
		return f.fs.h.check()
	}
	err := do()
	if absorbed {
		return f.fs.absorb(op, f.path, err)
	}
	return f.fs.fail(op, f.path, err)
}

func (f haltFile) Write(p []byte) (int, error) {
	n := len(p)
	err := f.mutate("write", func() (err error) { n, err = f.File.Write(p); return err })
	if err == nil {
		n = len(p)
		if f.alloc != nil && !f.fs.frozen() {
			f.alloc.wrote(f.File, n)
		}
	}
	return n, err
}

func (f haltFile) WriteAt(p []byte, off int64) (int, error) {
	n := len(p)
	err := f.mutate("write", func() (err error) { n, err = f.File.WriteAt(p, off); return err })
	if err == nil {
		n = len(p)
	}
	return n, err
}

// Preallocate reserves blocks ahead of the writes (Pebble asks for 110% of
// a memtable per WAL, which a WAL allocates a step at a time: prealloc.go)
// but changes no data, so its failure is no storage
// failure and halts nothing: Pebble ignores the error, and the writes go
// on into blocks allocated as they come. A disk with less free space than
// the preallocation (a node the space guard keeps from taking writes) can
// still hold raft's own writes; a write that then meets a full disk halts
// the store as any failed write does.
func (f haltFile) Preallocate(offset, length int64) error {
	if f.fs.frozen() {
		return nil // nothing more reaches the disk
	}
	if f.alloc != nil {
		return f.alloc.request(f.File, offset, length)
	}
	return f.File.Preallocate(offset, length)
}

func (f haltFile) Sync() error { return f.mutate("sync", f.File.Sync) }

func (f haltFile) SyncData() error { return f.mutate("sync", f.File.SyncData) }

func (f haltFile) SyncTo(length int64) (bool, error) {
	full := false
	err := f.mutate("sync", func() (err error) { full, err = f.File.SyncTo(length); return err })
	return full, err
}

// Close closes the file; closing a WAL file flushes nothing Pebble still
// waits on (its writer syncs first), so its error is absorbed.
func (f haltFile) Close() error {
	err := f.File.Close()
	if f.wal || f.dir {
		return f.fs.absorb("close", f.path, err)
	}
	return f.fs.fail("close", f.path, err)
}

// discardFile stands for a WAL file Pebble creates once the disk is frozen,
// or whose creation failed: it takes every write and keeps nothing. The
// store acknowledges nothing written to it.
type discardFile struct{ name string }

func (discardFile) Close() error                           { return nil }
func (discardFile) Read([]byte) (int, error)               { return 0, errDiscarded }
func (discardFile) ReadAt([]byte, int64) (int, error)      { return 0, errDiscarded }
func (discardFile) Write(p []byte) (int, error)            { return len(p), nil }
func (discardFile) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }
func (discardFile) Preallocate(int64, int64) error         { return nil }
func (d discardFile) Stat() (vfs.FileInfo, error)          { return discardInfo(d), nil }
func (discardFile) Sync() error                            { return nil }
func (discardFile) SyncTo(int64) (bool, error)             { return true, nil }
func (discardFile) SyncData() error                        { return nil }
func (discardFile) Prefetch(int64, int64) error            { return nil }
func (discardFile) Fd() uintptr                            { return vfs.InvalidFd }

// errDiscarded answers a read of a discardFile.
var errDiscarded = errors.New("raftstore: WAL file discarded after a halt")

// discardInfo describes a discardFile: empty, written now.
type discardInfo discardFile

func (d discardInfo) Name() string         { return filepath.Base(d.name) }
func (discardInfo) Size() int64            { return 0 }
func (discardInfo) Mode() fs.FileMode      { return 0o644 }
func (discardInfo) ModTime() time.Time     { return time.Time{} }
func (discardInfo) IsDir() bool            { return false }
func (discardInfo) Sys() any               { return nil }
func (discardInfo) DeviceID() vfs.DeviceID { return vfs.DeviceID{} }
