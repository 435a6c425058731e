package durable

import (
	"errors"
	"io"
	iofs "io/fs"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// crash returns what survives a power cut of fs: only what was synced.
func crash(fs *vfs.MemFS) *vfs.MemFS { return fs.CrashClone(vfs.CrashCloneCfg{}) }

func readAll(t *testing.T, fs vfs.FS, path string) string {
	t.Helper()
	f, err := fs.Open(path)
	require.NoError(t, err)
	defer f.Close()
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	return string(b)
}

func TestMkdirAllSurvivesACrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	require.NoError(t, MkdirAll(fs, "/a/b/c"))
	after := crash(fs)
	for _, d := range []string{"/a", "/a/b", "/a/b/c"} {
		st, err := after.Stat(d)
		require.NoError(t, err, d)
		require.True(t, st.IsDir(), d)
	}
	// An existing dir is left alone.
	require.NoError(t, MkdirAll(fs, "/a/b"))
}

func TestPlainMkdirAllDoesNotSurviveACrash(t *testing.T) {
	// The model the other tests rely on: without the directory syncs a
	// crash forgets the new directories.
	fs := vfs.NewCrashableMem()
	require.NoError(t, fs.MkdirAll("/a/b", 0o755))
	_, err := crash(fs).Stat("/a/b")
	require.ErrorIs(t, err, iofs.ErrNotExist)
}

func TestWriteFileReplacesDurably(t *testing.T) {
	fs := vfs.NewCrashableMem()
	require.NoError(t, MkdirAll(fs, "/d"))
	require.NoError(t, WriteFile(fs, "/d", "F", []byte("one")))
	require.NoError(t, WriteFile(fs, "/d", "F", []byte("two")))
	after := crash(fs)
	require.Equal(t, "two", readAll(t, after, "/d/F"))
	_, err := after.Stat("/d/F.tmp")
	require.ErrorIs(t, err, iofs.ErrNotExist, "the temp file is renamed away")
}

func TestErrorsNameThePath(t *testing.T) {
	fs := vfs.NewMem()
	err := WriteFile(fs, "/missing", "F", []byte("x"))
	require.ErrorContains(t, err, "/missing/F.tmp")
	require.True(t, errors.Is(err, iofs.ErrNotExist), "the cause is wrapped: %v", err)

	err = SyncDir(fs, "/missing")
	require.ErrorContains(t, err, "open dir /missing")
	require.ErrorIs(t, err, iofs.ErrNotExist)
}
