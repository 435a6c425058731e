package image

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

func TestWriteAndPrune(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, "/data", newKV())
	for _, n := range []uint64{10, 20, 30, 40, 50} {
		info := writeKV(t, s, n)
		require.Equal(t, imageName(n), info.Name)
		got, err := s.Verify(n)
		require.NoError(t, err)
		require.Equal(t, info.CRC, got.CRC)
		require.Equal(t, "cluster-a", got.ClusterID)
	}
	idx, err := s.Indexes()
	require.NoError(t, err)
	require.Equal(t, []uint64{50, 40, 30, 20, 10}, idx, "Write never deletes")
	require.NoError(t, s.Prune())
	idx, err = s.Indexes()
	require.NoError(t, err)
	require.Equal(t, []uint64{50, 40}, idx, "Keep defaults to 2")
	latest, err := s.Latest()
	require.NoError(t, err)
	require.Equal(t, uint64(50), latest.Index)
}

func TestSecondStoreOnSameDirRefused(t *testing.T) {
	fs := vfs.NewMem()
	openStore(t, fs, "/data", newKV())
	_, err := Open(Config{Dir: "/data", FS: fs, State: newKV()})
	require.ErrorContains(t, err, "another Store")
}

func TestOpenRemovesUnfinishedFiles(t *testing.T) {
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("/data/image", 0o755))
	writeAll(t, fs, "/data/image/image.ckpt", []byte("half an image"))
	writeAll(t, fs, "/data/image/image.fetch", []byte("half a download"))
	s := openStore(t, fs, "/data", newKV())
	names, err := fs.List(s.Dir())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{lockName}, names)
}

func TestWriteRefusesOtherCluster(t *testing.T) {
	s := openStore(t, vfs.NewMem(), "/data", newKV())
	_, err := s.Write(context.Background(), Header{ClusterID: "cluster-b", Index: 1}, newKV().Save)
	require.ErrorIs(t, err, ErrClusterMismatch)
}

// corruptFile flips one byte of a file in the middle.
func corruptFile(t testing.TB, fs vfs.FS, path string) {
	b := readAll(t, fs, path)
	b[len(b)/2] ^= 0x40
	writeAll(t, fs, path, b)
}

func TestLoadLatest(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (vfs.FS, *Store) {
		fs := vfs.NewMem()
		s := openStore(t, fs, "/data", newKV())
		writeKV(t, s, 100)
		writeKV(t, s, 200)
		require.NoError(t, s.Close())
		return fs, s
	}
	t.Run("newest", func(t *testing.T) {
		fs, _ := setup(t)
		st := newKV()
		s := openStore(t, fs, "/data", st)
		idx, m, err := s.LoadLatest(ctx, 150)
		require.NoError(t, err)
		require.Equal(t, uint64(200), idx)
		require.Equal(t, []byte("m"), m)
		require.Equal(t, expectedKV(200), st.snapshot())
	})
	t.Run("corrupt newest falls back with a warning", func(t *testing.T) {
		fs, _ := setup(t)
		corruptFile(t, fs, "/data/image/image.200")
		st := newKV()
		var logs logBuffer
		s := openStore(t, fs, "/data", st, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		idx, _, err := s.LoadLatest(ctx, 50)
		require.NoError(t, err)
		require.Equal(t, uint64(100), idx)
		require.Equal(t, expectedKV(100), st.snapshot())
		require.Contains(t, logs.String(), "level=WARN")
		require.Contains(t, logs.String(), "fell back to an older image")
		require.Contains(t, logs.String(), "image.200")
		names, _ := fs.List("/data/image")
		require.Contains(t, names, "image.200.corrupt", "the corrupt image is kept aside, not reused")
		ids, _ := s.Indexes()
		require.Equal(t, []uint64{100}, ids)
	})
	t.Run("corrupt newest and journal does not cover the gap", func(t *testing.T) {
		fs, _ := setup(t)
		corruptFile(t, fs, "/data/image/image.200")
		s := openStore(t, fs, "/data", newKV())
		_, _, err := s.LoadLatest(ctx, 150)
		require.ErrorIs(t, err, ErrNoUsableImage)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "/data/image/image.200")
		require.Contains(t, err.Error(), "checksum mismatch")
		names, _ := fs.List("/data/image")
		require.Contains(t, names, "image.200", "a file that is the only hope stays where it is")
	})
	t.Run("truncated newest", func(t *testing.T) {
		fs, _ := setup(t)
		b := readAll(t, fs, "/data/image/image.200")
		writeAll(t, fs, "/data/image/image.200", b[:len(b)-7])
		s := openStore(t, fs, "/data", newKV())
		_, _, err := s.LoadLatest(ctx, 150)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "image.200")
	})
	t.Run("unknown version", func(t *testing.T) {
		fs, _ := setup(t)
		writeAll(t, fs, "/data/image/image.200", withVersion(t, readAll(t, fs, "/data/image/image.200"), 7))
		s := openStore(t, fs, "/data", newKV())
		_, _, err := s.LoadLatest(ctx, 150)
		require.ErrorIs(t, err, ErrUnknownVersion)
		require.Contains(t, err.Error(), "format version 7")
	})
	t.Run("wrong cluster id", func(t *testing.T) {
		fs, _ := setup(t)
		s := openStore(t, fs, "/data", newKV(), func(c *Config) { c.ClusterID = "cluster-b" })
		_, _, err := s.LoadLatest(ctx, 0)
		require.ErrorIs(t, err, ErrClusterMismatch)
		require.Contains(t, err.Error(), `"cluster-a"`)
	})
	t.Run("cluster id adopted then checked", func(t *testing.T) {
		fs, _ := setup(t)
		s := openStore(t, fs, "/data", newKV(), func(c *Config) { c.ClusterID = "" })
		_, _, err := s.LoadLatest(ctx, 0)
		require.NoError(t, err)
		require.Equal(t, "cluster-a", s.ClusterID())
		require.ErrorIs(t, s.SetClusterID("cluster-b"), ErrClusterMismatch)
		require.NoError(t, s.SetClusterID("cluster-a"))
	})
	t.Run("journal compacted past every image", func(t *testing.T) {
		fs, _ := setup(t)
		s := openStore(t, fs, "/data", newKV())
		_, _, err := s.LoadLatest(ctx, 300)
		require.ErrorIs(t, err, ErrNoUsableImage)
		require.Contains(t, err.Error(), "image.200")
	})
	t.Run("no image, whole journal", func(t *testing.T) {
		s := openStore(t, vfs.NewMem(), "/data", newKV())
		idx, m, err := s.LoadLatest(ctx, 0)
		require.NoError(t, err)
		require.Zero(t, idx)
		require.Nil(t, m)
		_, _, err = s.LoadLatest(ctx, 5)
		require.ErrorIs(t, err, ErrNoUsableImage)
	})
	t.Run("fetched image used only once raft recorded it", func(t *testing.T) {
		fs, _ := setup(t)
		require.NoError(t, fs.Rename("/data/image/image.200", "/data/image/image.200.fetched"))
		st := newKV()
		s := openStore(t, fs, "/data", st)
		idx, _, err := s.LoadLatest(ctx, 50)
		require.NoError(t, err)
		require.Equal(t, uint64(100), idx, "a fetched image raft never recorded is not loaded")
		idx, _, err = s.LoadLatest(ctx, 200)
		require.NoError(t, err)
		require.Equal(t, uint64(200), idx)
		require.Equal(t, expectedKV(200), st.snapshot())
		ids, _ := s.Indexes()
		require.Equal(t, []uint64{200, 100}, ids)
	})
}

func TestInstallVerifiesBeforeTouchingState(t *testing.T) {
	fs := vfs.NewMem()
	st := newKV()
	st.Apply(1, []byte("live=1"))
	s := openStore(t, fs, "/data", st)
	writeKV(t, s, 100)
	corruptFile(t, fs, "/data/image/image.100")
	err := s.Install(context.Background(), 100)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Equal(t, map[string]string{"live": "1"}, st.snapshot(), "the live state is untouched")
	require.ErrorIs(t, s.Install(context.Background(), 7), ErrNotFound)
}

func TestParseName(t *testing.T) {
	for name, want := range map[string]uint64{"image.1": 1, "image.18446744073709551615": 1<<64 - 1} {
		got, ok := parseName(name, "")
		require.True(t, ok, name)
		require.Equal(t, want, got)
	}
	for _, name := range []string{"image.", "image.01", "image.-1", "image.1x", "image.ckpt", "LOCK", "image.18446744073709551616"} {
		_, ok := parseName(name, "")
		require.False(t, ok, name)
	}
	_ = errors.New
	_ = fmt.Sprint
}

func TestLoadLatestEveryImageBadWholeJournal(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, "/data", newKV())
	writeKV(t, s, 100)
	require.NoError(t, s.Close())
	corruptFile(t, fs, "/data/image/image.100")
	var logs logBuffer
	st := newKV()
	s = openStore(t, fs, "/data", st, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	idx, _, err := s.LoadLatest(context.Background(), 0)
	require.NoError(t, err, "the journal holds every entry: replay it all")
	require.Zero(t, idx)
	require.Empty(t, st.snapshot(), "nothing of the corrupt image reached the state")
	require.Contains(t, logs.String(), "level=WARN")
	require.Contains(t, logs.String(), "replaying the whole journal")
	names, _ := fs.List("/data/image")
	require.Contains(t, names, "image.100.corrupt")
}

// Prune keeps every image after the one the log starts after, not only the
// newest Keep: the journal may compact up to any image it was told of,
// and the one its log then starts after must still be here (a watch
// resumes from it, a checkpoint replays from it).
func TestPruneKeepsEveryImageTheLogMayNextStartAfter(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, "/data", newKV(), func(c *Config) { c.Keep = 2 })
	for _, i := range []uint64{100, 200, 300, 400} {
		writeKV(t, s, i)
	}
	s.Retain(100)
	require.NoError(t, s.Prune())
	idx, err := s.Indexes()
	require.NoError(t, err)
	require.Equal(t, []uint64{400, 300, 200, 100}, idx, "the log may next be compacted up to 200")

	s.Retain(300)
	require.NoError(t, s.Prune())
	idx, err = s.Indexes()
	require.NoError(t, err)
	require.Equal(t, []uint64{400, 300}, idx)
}

// A log that starts at its first entry (Retain(0): nothing compacted yet)
// may be compacted up to any image the journal was told of, the oldest
// included: Prune keeps them all. Without Retain, it keeps the newest Keep.
func TestPruneKeepsEveryImageWhileTheLogIsWhole(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, "/data", newKV(), func(c *Config) { c.Keep = 2 })
	for _, i := range []uint64{100, 200, 300} {
		writeKV(t, s, i)
	}
	s.Retain(0)
	require.NoError(t, s.Prune())
	idx, err := s.Indexes()
	require.NoError(t, err)
	require.Equal(t, []uint64{300, 200, 100}, idx, "the log may be compacted up to 100 next")

	other := openStore(t, vfs.NewMem(), "/other", newKV(), func(c *Config) { c.Keep = 2 })
	for _, i := range []uint64{100, 200, 300} {
		writeKV(t, other, i)
	}
	require.NoError(t, other.Prune())
	idx, err = other.Indexes()
	require.NoError(t, err)
	require.Equal(t, []uint64{300, 200}, idx, "no Retain: the newest Keep")
}
