package journaltest

import (
	"os"
	"strings"
	"sync"
	"time"

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
	onCrash func()
	// syncDelay and syncSuffix make a slow disk (SetSyncDelay).
	syncDelay  time.Duration
	syncSuffix string
	// free, reportFree and full make a disk that fills (diskspace.go).
	free       int64
	reportFree bool
	full       bool
	// onRename runs before each rename (OnRename).
	onRename func(old, name string)
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

// OnCrash sets f to run the moment the power cut is taken (a test takes
// the node off its network there, so it acknowledges nothing the cut state
// does not hold). f runs with the CrashFS locked: it must not use it.
func (fs *CrashFS) OnCrash(f func()) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.onCrash = f
}

// Armed reports whether a power cut is armed and not yet taken.
func (fs *CrashFS) Armed() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.at > 0 && fs.crashed == nil
}

// Disarm cancels a power cut not yet taken.
func (fs *CrashFS) Disarm() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.at = -1
}

// SetSyncDelay makes every sync of a file whose name ends in suffix (""
// for every file; directories never) take d longer, on the clock's time
// (virtual inside a testing/synctest bubble): a slow disk. Pebble's WAL
// files end in ".log", so SetSyncDelay(d, ".log") slows exactly the
// journal's durable writes (entries, term and vote). 0 restores a fast
// disk. The delay applies to files already open too.
func (fs *CrashFS) SetSyncDelay(d time.Duration, suffix string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.syncDelay, fs.syncSuffix = d, suffix
}

// SyncDelay returns the delay and the suffix SetSyncDelay set.
func (fs *CrashFS) SyncDelay() (time.Duration, string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.syncDelay, fs.syncSuffix
}

// slowSync waits out the sync delay of the file name.
func (fs *CrashFS) slowSync(name string) {
	d, suffix := fs.SyncDelay()
	if d <= 0 || name == "" || !strings.HasSuffix(name, suffix) {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
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
		fs.take()
	}
	return fs.crashed
}

func (fs *CrashFS) step() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.steps++
	if fs.steps == fs.at {
		fs.take()
	}
}

// take keeps the power cut's state and runs the OnCrash hook; fs.mu is
// held.
func (fs *CrashFS) take() {
	fs.crashed = fs.MemFS.CrashClone(vfs.CrashCloneCfg{})
	if fs.onCrash != nil {
		fs.onCrash()
	}
}

// wrap wraps an opened file; name is "" for a directory.
func (fs *CrashFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return crashFile{File: f, fs: fs, name: name}, nil
}

// Create implements vfs.FS.
func (fs *CrashFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.noSpace("create", name); err != nil {
		return nil, err
	}
	fs.step()
	f, err := fs.MemFS.Create(name, c)
	return fs.wrap(name, f, err)
}

// OpenReadWrite implements vfs.FS.
func (fs *CrashFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	fs.step()
	f, err := fs.MemFS.OpenReadWrite(name, c, o...)
	return fs.wrap(name, f, err)
}

// ReuseForWrite implements vfs.FS.
func (fs *CrashFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.step()
	f, err := fs.MemFS.ReuseForWrite(old, name, c)
	return fs.wrap(name, f, err)
}

// OpenDir implements vfs.FS.
func (fs *CrashFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.MemFS.OpenDir(name)
	return fs.wrap("", f, err)
}

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

// OnRename sets f to run before each rename, unlocked: a test holds a
// rename (f blocks) to stop a writer between two of its durable steps.
func (fs *CrashFS) OnRename(f func(old, name string)) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.onRename = f
}

// Rename implements vfs.FS.
func (fs *CrashFS) Rename(old, name string) error {
	fs.mu.Lock()
	f := fs.onRename
	fs.mu.Unlock()
	if f != nil {
		f(old, name)
	}
	fs.step()
	return fs.MemFS.Rename(old, name)
}

// MkdirAll implements vfs.FS.
func (fs *CrashFS) MkdirAll(dir string, perm os.FileMode) error {
	if _, err := fs.MemFS.Stat(dir); err != nil {
		if err := fs.noSpace("mkdir", dir); err != nil {
			return err
		}
	}
	fs.step()
	return fs.MemFS.MkdirAll(dir, perm)
}

type crashFile struct {
	vfs.File
	fs   *CrashFS
	name string // "" for a directory
}

func (f crashFile) Sync() error {
	f.fs.slowSync(f.name)
	f.fs.step()
	return f.File.Sync()
}

func (f crashFile) SyncData() error {
	f.fs.slowSync(f.name)
	f.fs.step()
	return f.File.SyncData()
}

func (f crashFile) SyncTo(n int64) (bool, error) {
	f.fs.slowSync(f.name)
	f.fs.step()
	return f.File.SyncTo(n)
}
