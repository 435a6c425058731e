package raftstore

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// heldSyncFS holds the fsyncs of Pebble's WAL files, once on is set, until
// release is closed: a disk whose fsync lasts as long as the test says.
type heldSyncFS struct {
	vfs.FS
	on      atomic.Bool
	started chan struct{} // a held fsync began (one send)
	release chan struct{}
}

type heldSyncFile struct {
	vfs.File
	fs *heldSyncFS
}

func (fs *heldSyncFS) hold() {
	if !fs.on.CompareAndSwap(true, false) {
		return
	}
	fs.started <- struct{}{}
	<-fs.release
}

func (f heldSyncFile) Sync() error     { f.fs.hold(); return f.File.Sync() }
func (f heldSyncFile) SyncData() error { f.fs.hold(); return f.File.SyncData() }
func (f heldSyncFile) SyncTo(n int64) (bool, error) {
	f.fs.hold()
	return f.File.SyncTo(n)
}

func (fs *heldSyncFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return heldSyncFile{File: f, fs: fs}, nil
}

func (fs *heldSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *heldSyncFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	return fs.wrap(name, f, err)
}

// A compaction's fsync holds no lock that raft's reads take: on a slow
// disk the raft loop (FirstIndex, Term, Entries) goes on while the
// compaction syncs, and reads the log as compacted from the moment
// Compact starts writing.
func TestCompactionFsyncLeavesRaftsReadsFree(t *testing.T) {
	fs := &heldSyncFS{FS: vfs.NewMem(), started: make(chan struct{}), release: make(chan struct{})}
	s := openMem(t, fs, 0)
	require.NoError(t, s.Append(hardState(2, 1, 6), append(ents(1, 4, 1), ents(5, 10, 2)...), nil, true))
	require.NoError(t, s.SetSnapshot(snapshot(5, 2, 1, 2, 3)))

	fs.on.Store(true)
	done := make(chan error, 1)
	go func() { done <- s.Compact(4) }()
	<-fs.started
	locked := s.mu.TryRLock()
	if !locked {
		close(fs.release)
		require.NoError(t, <-done)
		require.FailNow(t, "raft's reads wait for the compaction's fsync")
	}
	s.mu.RUnlock()
	first, err := s.FirstIndex()
	close(fs.release)
	require.NoError(t, <-done)
	require.NoError(t, err)
	require.Equal(t, uint64(5), first, "the log reads as compacted while the compaction syncs")
	term, err := s.Term(4)
	require.NoError(t, err)
	require.Equal(t, uint64(1), term)
}
