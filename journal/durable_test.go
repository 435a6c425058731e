package journal

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
)

// diskFS wraps the real filesystem: it records what is written to the
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

func newDiskFS() *diskFS { return &diskFS{FS: vfs.Default, hit: make(chan struct{}, 1)} }

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
		c := newCluster(t)
		c.start(1, 1)
		c.waitLeader(1)
		n1, n2 := c.nodes[1], c.nodes[2]
		propose(t, n2, "as-observer")
		require.NoError(t, n1.j.Promote(ctxT(t, 5*time.Second), 2))
		propose(t, n2, "as-follower")
		require.Equal(t, Follower, n2.j.Status().Role)
		members, err := n2.j.readMembers()
		require.NoError(t, err)
		require.Equal(t, Follower, members.Members[2].Role)

		n2.closeJournal()
		fs := newDiskFS()
		n2.sm = newMemSM()
		require.NoError(t, c.open(n2, func(cfg *Config) { cfg.FS = fs }))
		require.NoError(t, n2.j.ReadBarrier(ctxT(t, 5*time.Second)))
		require.True(t, n2.sm.has("as-observer"), "the whole log replayed")
		for _, w := range fs.taken() {
			switch w.name {
			case "ROLE":
				require.Equal(t, "role=follower\n", w.data, "ROLE written backwards during the replay")
			case "MEMBERS":
				m, err := decodeMembership([]byte(w.data))
				require.NoError(t, err)
				require.Greater(t, m.Index, members.Index, "MEMBERS written backwards during the replay")
			}
		}
		require.Equal(t, Follower, n2.j.Status().Role)

		// A later change is written as before.
		n3 := c.listen(3)
		require.NoError(t, c.open(n3, func(cfg *Config) { cfg.Join = n1.addr; cfg.Role = Observer }))
		require.NoError(t, n2.j.ReadBarrier(ctxT(t, 5*time.Second)))
		after, err := n2.j.readMembers()
		require.NoError(t, err)
		require.Contains(t, after.Members, uint64(3))
		require.Greater(t, after.Index, members.Index)
	})
}

// loopResponds fails the test unless j's raft loop runs an operation
// within a second.
func loopResponds(t *testing.T, j *Journal, what string) {
	t.Helper()
	ran := make(chan struct{})
	timeout := time.NewTimer(time.Second)
	defer timeout.Stop()
	select {
	case j.opc <- func() { close(ran) }:
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
		c := newCluster(t)
		fs := newDiskFS()
		n1 := c.listen(1)
		require.NoError(t, c.open(n1, func(cfg *Config) { cfg.Bootstrap = true; cfg.FS = fs }))
		c.waitLeader(1)
		n2 := c.listen(2)
		require.NoError(t, c.open(n2, func(cfg *Config) { cfg.Join = n1.addr; cfg.Role = Observer }))
		propose(t, n1, "a")

		release := fs.hold(func(p string) bool { return filepath.Base(p) == "MEMBERS.tmp" })
		t.Cleanup(release)
		promoted := make(chan error, 1)
		go func() { promoted <- n1.j.Promote(context.Background(), 2) }()
		<-fs.hit
		loopResponds(t, n1.j, "MEMBERS is synced")
		release()
		require.NoError(t, <-promoted)

		idx := propose(t, n1, "b")
		term, err := n1.j.TermAt(idx)
		require.NoError(t, err)
		blob, err := n1.j.membershipBlobAt(idx)
		require.NoError(t, err)
		journalDir := filepath.Join(n1.dir, "journal")
		release = fs.hold(func(p string) bool { return strings.HasPrefix(p, journalDir) })
		t.Cleanup(release)
		written := make(chan error, 1)
		go func() { written <- n1.j.imageWritten(context.Background(), idx, term, blob) }()
		<-fs.hit
		loopResponds(t, n1.j, "the image is recorded")
		release()
		require.NoError(t, <-written)
		require.Equal(t, idx, n1.j.Status().Image)
	})
}
