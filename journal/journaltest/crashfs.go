package journaltest

import (
	"os"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// CrashFS is a crashable in-memory filesystem for power-cut tests at every
// step of an operation. It counts the steps that change what a power cut
// leaves (creating, renaming, removing and linking files, creating
// directories, syncing files and directories) and, armed with CrashAt(n),
// keeps the state a power cut right before step n would leave: Crashed.
// The operation itself goes on, on a disk nobody sees again. Count the
// steps of a whole run on an unarmed CrashFS first, then run once per
// step. It is safe for concurrent use.
type CrashFS struct {
	*vfs.MemFS
	mu      sync.Mutex
	steps   int
	at      int // 0: never
	crashed *vfs.MemFS
}

// NewCrashFS returns an empty, unarmed CrashFS.
func NewCrashFS() *CrashFS { return &CrashFS{MemFS: vfs.NewCrashableMem()} }

// WrapCrashFS returns an unarmed CrashFS over m, which must be crashable
// (vfs.NewCrashableMem, or a CrashClone of one).
func WrapCrashFS(m *vfs.MemFS) *CrashFS { return &CrashFS{MemFS: m} }

// CrashAt arms the power cut before step n (1 is the first).
func (fs *CrashFS) CrashAt(n int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.at = n
}

// Steps returns the number of steps taken so far.
func (fs *CrashFS) Steps() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.steps
}

// Crashed returns what the power cut left, or nil if it has not happened.
func (fs *CrashFS) Crashed() *vfs.MemFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.crashed
}

// CutNow cuts the power now unless that happened already, and disarms.
func (fs *CrashFS) CutNow() *vfs.MemFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.at = -1
	if fs.crashed == nil {
		fs.crashed = fs.MemFS.CrashClone(vfs.CrashCloneCfg{})
	}
	return fs.crashed
}

func (fs *CrashFS) step() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.steps++
	if fs.steps == fs.at {
		fs.crashed = fs.MemFS.CrashClone(vfs.CrashCloneCfg{})
	}
}

func (fs *CrashFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return crashFile{File: f, fs: fs}, nil
}

// Create implements vfs.FS.
func (fs *CrashFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.step()
	return fs.wrap(fs.MemFS.Create(name, c))
}

// OpenReadWrite implements vfs.FS.
func (fs *CrashFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	fs.step()
	return fs.wrap(fs.MemFS.OpenReadWrite(name, c, o...))
}

// ReuseForWrite implements vfs.FS.
func (fs *CrashFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.step()
	return fs.wrap(fs.MemFS.ReuseForWrite(old, name, c))
}

// OpenDir implements vfs.FS.
func (fs *CrashFS) OpenDir(name string) (vfs.File, error) { return fs.wrap(fs.MemFS.OpenDir(name)) }

// Link implements vfs.FS.
func (fs *CrashFS) Link(old, name string) error {
	fs.step()
	return fs.MemFS.Link(old, name)
}

// Remove implements vfs.FS.
func (fs *CrashFS) Remove(name string) error {
	fs.step()
	return fs.MemFS.Remove(name)
}

// RemoveAll implements vfs.FS.
func (fs *CrashFS) RemoveAll(name string) error {
	fs.step()
	return fs.MemFS.RemoveAll(name)
}

// Rename implements vfs.FS.
func (fs *CrashFS) Rename(old, name string) error {
	fs.step()
	return fs.MemFS.Rename(old, name)
}

// MkdirAll implements vfs.FS.
func (fs *CrashFS) MkdirAll(dir string, perm os.FileMode) error {
	fs.step()
	return fs.MemFS.MkdirAll(dir, perm)
}

type crashFile struct {
	vfs.File
	fs *CrashFS
}

func (f crashFile) Sync() error {
	f.fs.step()
	return f.File.Sync()
}

func (f crashFile) SyncData() error {
	f.fs.step()
	return f.File.SyncData()
}

func (f crashFile) SyncTo(n int64) (bool, error) {
	f.fs.step()
	return f.File.SyncTo(n)
}
