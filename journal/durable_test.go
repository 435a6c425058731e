package journal_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// diskFS wraps a node's filesystem: it records what is written to the
// ROLE and MEMBERS files, and holds the fsyncs of the files match selects
// while held is set (hit hears of the first one held).
type diskFS struct {
	vfs.FS
	mu     sync.Mutex
	writes []fileWrite
	match  func(path string) bool
	held   chan struct{} // closed: let syncs through
	hit    chan struct{} // cap 1
}

type fileWrite struct{ name, data string }

func newDiskFS(fs vfs.FS) *diskFS { return &diskFS{FS: fs, hit: make(chan struct{}, 1)} }

// hold makes the syncs of matching files wait until the returned release
// is called (idempotent; call it from a Cleanup too).
func (fs *diskFS) hold(match func(path string) bool) (release func()) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	select {
	case <-fs.hit: // from an earlier hold
	default:
	}
	fs.match, fs.held = match, make(chan struct{})
	held := fs.held
	var once sync.Once
	return func() { once.Do(func() { close(held) }) }
}

func (fs *diskFS) taken() []fileWrite {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]fileWrite(nil), fs.writes...)
}

type diskFile struct {
	vfs.File
	fs   *diskFS
	path string
	buf  *bytes.Buffer // ROLE or MEMBERS content, else nil
}

func (f diskFile) Write(p []byte) (int, error) {
	if f.buf != nil {
		f.buf.Write(p)
	}
	return f.File.Write(p)
}

func (f diskFile) wait() {
	f.fs.mu.Lock()
	match, held := f.fs.match, f.fs.held
	f.fs.mu.Unlock()
	if match == nil || !match(f.path) {
		return
	}
	select {
	case f.fs.hit <- struct{}{}:
	default:
	}
	<-held
}

func (f diskFile) Sync() error     { f.wait(); return f.File.Sync() }
func (f diskFile) SyncData() error { f.wait(); return f.File.SyncData() }
func (f diskFile) SyncTo(n int64) (bool, error) {
	f.wait()
	return f.File.SyncTo(n)
}

func (f diskFile) Close() error {
	if f.buf != nil {
		f.fs.mu.Lock()
		f.fs.writes = append(f.fs.writes, fileWrite{strings.TrimSuffix(filepath.Base(f.path), ".tmp"), f.buf.String()})
		f.fs.mu.Unlock()
	}
	return f.File.Close()
}

func (fs *diskFS) wrap(path string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	df := diskFile{File: f, fs: fs, path: path}
	if b := filepath.Base(path); b == "ROLE.tmp" || b == "MEMBERS.tmp" {
		df.buf = &bytes.Buffer{}
	}
	return df, nil
}

func (fs *diskFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *diskFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, o...)
	return fs.wrap(name, f, err)
}

func (fs *diskFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	return fs.wrap(name, f, err)
}

func (fs *diskFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	return fs.wrap(name, f, err)
}

// A node replaying its log from index 1 after a promotion does not write
// its past: ROLE never goes back to observer and MEMBERS never to an older
// membership, so a crash anywhere in the replay leaves files that open (a
// crash between role=observer and role=follower must not make the next
// Open fail with ErrRoleMismatch).
func TestReplayNeverWritesTheDurableFilesBackwards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var fs *diskFS // node 2's filesystem from its restart on
		c := newHTTPBubble(t, journaltest.Options{
			Voters: 1, Observers: 1, OnDisk: true,
			NewStateMachine: func(uint64) journal.StateMachine { return newMemSM() },
			WrapFS: func(id uint64, inner vfs.FS) vfs.FS {
				mu.Lock()
				defer mu.Unlock()
				if id == 2 && fs != nil {
					return fs
				}
				return inner
			},
		})
		n1, n2 := c.Node(1), c.Node(2)
		propose(t, n2, "as-observer")
		require.NoError(t, n1.Journal().Promote(ctxFor(t, 5*time.Second), 2))
		propose(t, n2, "as-follower")
		require.Equal(t, journal.Follower, n2.Journal().Status().Role)
		membersIndex, members, err := n2.Journal().MembersFileForTest()
		require.NoError(t, err)
		require.Equal(t, journal.Follower, members[2].Role)
		c.stop(t, 2)
		mu.Lock()
		fs = newDiskFS(vfs.Default)
		mu.Unlock()
		require.NoError(t, c.restart(t, 2, nil))
		require.NoError(t, n2.Journal().ReadBarrier(ctxFor(t, 5*time.Second)))
		require.True(t, smOf(n2).has("as-observer"), "the whole log replayed")
		for _, w := range fs.taken() {
			switch w.name {
			case "ROLE":
				require.Equal(t, "role=follower\n", w.data, "ROLE written backwards during the replay")
			case "MEMBERS":
				index, err := journal.MembershipIndexForTest([]byte(w.data))
				require.NoError(t, err)
				require.Greater(t, index, membersIndex, "MEMBERS written backwards during the replay")
			}
		}
		require.Equal(t, journal.Follower, n2.Journal().Status().Role)
		// A later change is written as before.
		_, err = c.add(t, journal.Observer, nil)
		require.NoError(t, err)
		require.NoError(t, n2.Journal().ReadBarrier(ctxFor(t, 5*time.Second)))
		afterIndex, after, err := n2.Journal().MembersFileForTest()
		require.NoError(t, err)
		require.Contains(t, after, uint64(3))
		require.Greater(t, afterIndex, membersIndex)
	})
}

// loopResponds fails the test unless j's raft loop runs an operation
// within a second.
func loopResponds(t *testing.T, j *journal.Journal, what string) {
	t.Helper()
	ran := make(chan struct{})
	timeout := time.NewTimer(time.Second)
	defer timeout.Stop()
	select {
	case j.LoopOpsForTest() <- func() { close(ran) }:
	case <-timeout.C:
		t.Fatalf("the raft loop takes no operation while %s", what)
	}
	select {
	case <-ran:
	case <-timeout.C:
		t.Fatalf("the raft loop waits for the disk while %s", what)
	}
}

// The raft loop never waits for an fsync: not for the MEMBERS and ROLE
// files and membership records of a change (the applier writes them), nor
// for ImageWritten's snapshot record and compaction (the append goroutine
// does).
func TestLoopDoesNotWaitForTheDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newDiskFS(vfs.Default)
		c := newHTTPBubble(t, journaltest.Options{
			Voters: 1, Observers: 1, OnDisk: true,
			NewStateMachine: func(uint64) journal.StateMachine { return newMemSM() },
			WrapFS: func(id uint64, inner vfs.FS) vfs.FS {
				if id == 1 {
					return fs
				}
				return inner
			},
		})
		n1 := c.Node(1)
		j1 := n1.Journal()
		propose(t, n1, "a")
		release := fs.hold(func(p string) bool { return filepath.Base(p) == "MEMBERS.tmp" })
		t.Cleanup(release)
		promoted := make(chan error, 1)
		go func() { promoted <- j1.Promote(context.Background(), 2) }()
		<-fs.hit
		loopResponds(t, j1, "MEMBERS is synced")
		release()
		require.NoError(t, <-promoted)
		idx := propose(t, n1, "b")
		term, err := j1.TermAt(idx)
		require.NoError(t, err)
		blob, err := j1.MembershipBlobAtForTest(idx)
		require.NoError(t, err)
		journalDir := filepath.Join(n1.Dir, "journal")
		release = fs.hold(func(p string) bool { return strings.HasPrefix(p, journalDir) })
		t.Cleanup(release)
		written := make(chan error, 1)
		go func() { written <- j1.ImageWrittenForTest(context.Background(), idx, term, blob) }()
		<-fs.hit
		loopResponds(t, j1, "the image is recorded")
		release()
		require.NoError(t, <-written)
		require.Equal(t, idx, j1.Status().Image)
	})
}
