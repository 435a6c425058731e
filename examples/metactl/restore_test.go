package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// TestBackupThenRestore: a backup of a running node is its newest image,
// byte for byte; a restore of it makes a dir that check accepts and from
// which a frontend starts as the only voter of a new cluster with every
// node of the image, accepts writes, and restarts as usual.
func TestBackupThenRestore(t *testing.T) {
	d := newDataDir(t, 30, 20)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	old, err := frontend.Start(ctx, frontend.Config{ID: 1, Dir: d.dir, Addr: "127.0.0.1:0", Insecure: true, HeartbeatInterval: time.Hour})
	require.NoError(t, err)
	oldCluster := old.Journal().Status().ClusterID

	out := filepath.Join(t.TempDir(), "backup.img")
	r := metactl(t, "backup", "-from", old.Addr(), "-out", out)
	require.NoError(t, old.Close())
	require.Equal(t, 0, r.code, r.stderr)
	var b struct {
		Index uint64 `json:"index"`
		Bytes int64  `json:"bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &b))
	require.Equal(t, d.image, b.Index)
	want, err := os.ReadFile(d.imagePath())
	require.NoError(t, err)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, want, got, "the backup is the member's image")
	require.EqualValues(t, len(got), b.Bytes)
	_, err = os.Stat(out + ".tmp")
	require.ErrorIs(t, err, os.ErrNotExist, "no temporary file left")

	dir := filepath.Join(t.TempDir(), "restored")
	addr := "127.0.0.1:0"
	r = metactl(t, "restore", "-image", out, "-dir", dir, "-id", "7", "-addr", addr)
	require.Equal(t, 0, r.code, r.stderr)
	var rs restoreJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rs))
	require.NotEqual(t, oldCluster, rs.ClusterID, "a new cluster")
	require.Equal(t, d.image, rs.Index)

	r = metactl(t, "check", dir)
	require.Equal(t, 0, r.code, r.stderr)
	r = metactl(t, "journal", "status", dir)
	require.Equal(t, 0, r.code, r.stderr)
	var js journalStatusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &js))
	require.Equal(t, d.image+1, js.FirstIndex, "the image's index is the log's truncation point")
	require.Equal(t, []uint64{7}, js.Voters)

	r = metactl(t, "restore", "-image", out, "-dir", dir, "-id", "7", "-addr", addr)
	require.Equal(t, 1, r.code, "restore refuses a dir that is not empty")
	require.Contains(t, r.stderr, "not empty")

	for round := range 2 { // the first start, then an ordinary restart
		fe, err := frontend.Start(ctx, frontend.Config{ID: 7, Dir: dir, Addr: addr, Insecure: true, HeartbeatInterval: time.Hour})
		require.NoError(t, err, "round %d", round)
		st := fe.Journal().Status()
		require.Equal(t, rs.ClusterID, st.ClusterID)
		require.GreaterOrEqual(t, st.Applied, d.image)
		for i := range 20 {
			_, ok := fe.Tree().Get(fmt.Sprintf("/db%d", i))
			require.True(t, ok, "/db%d restored", i)
		}
		_, ok := fe.Tree().Get("/db25")
		require.False(t, ok, "/db25 came after the image")
		data, err := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: fmt.Sprintf("/new%d", round), Kind: "database"}}}.Encode()
		require.NoError(t, err)
		idx, _, err := fe.Journal().Propose(ctx, data)
		require.NoError(t, err, "the restored node leads and accepts writes")
		require.Greater(t, idx, d.image)
		if round == 0 {
			// A checkpoint on the new cluster writes an image of its own.
			info, err := fe.Checkpointer().Checkpoint(ctx)
			require.NoError(t, err)
			require.Greater(t, info.Index, d.image)
		} else {
			_, ok := fe.Tree().Get("/new0")
			require.True(t, ok, "the write before the restart is kept")
		}
		require.NoError(t, fe.Close())
	}
}

// TestRestoreCrashSafe cuts the power before every step of a restore: the
// target dir is then absent, or a complete data dir that check accepts and
// a journal opens, holding the image's state; a restore run again
// afterwards succeeds either way.
func TestRestoreCrashSafe(t *testing.T) {
	d := newDataDir(t, 8, 8)
	src, err := os.ReadFile(d.imagePath())
	require.NoError(t, err)
	seed := func(fs vfs.FS) {
		require.NoError(t, fs.MkdirAll("/backups", 0o755))
		f, err := fs.Create("/backups/b.img", vfs.WriteCategoryUnspecified)
		require.NoError(t, err)
		_, err = f.Write(bytes.Clone(src)) // a vfs.File may modify what it is given
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
		for _, d := range []string{"/backups", "/"} {
			dir, err := fs.OpenDir(d)
			require.NoError(t, err)
			require.NoError(t, dir.Sync())
			require.NoError(t, dir.Close())
		}
	}
	cfg := restoreConfig{Image: "/backups/b.img", Dir: "/data/node7", ID: 7, Addr: "node7:1"}
	restoreOn := func(fs vfs.FS) error {
		_, err := restoreDir(t.Context(), fs, cfg, io.Discard)
		return err
	}

	probe := journaltest.NewCrashFS()
	seed(probe)
	before := probe.Steps()
	require.NoError(t, restoreOn(probe))
	steps := probe.Steps() - before
	require.Greater(t, steps, 10)
	for at := 1; at <= steps+1; at++ {
		t.Run(fmt.Sprintf("step%d", at), func(t *testing.T) {
			fs := journaltest.NewCrashFS()
			seed(fs)
			fs.CrashAt(fs.Steps() + at)
			_ = restoreOn(fs)
			crashed := fs.CutNow()
			if _, err := crashed.Stat(cfg.Dir); err == nil {
				requireOpens(t, crashed, cfg, d.image)
			}
			require.NoError(t, restoreOnAgain(t, crashed, cfg))
		})
	}
}

// restoreOnAgain runs a restore after a crash unless the dir was made.
func restoreOnAgain(t *testing.T, fs vfs.FS, cfg restoreConfig) error {
	if _, err := fs.Stat(cfg.Dir); err == nil {
		return nil
	}
	var stderr bytes.Buffer
	_, err := restoreDir(t.Context(), fs, cfg, &stderr)
	if err == nil {
		requireOpens(t, fs, cfg, 0)
	}
	return err
}

// requireOpens checks a restored dir: no problem found, and a journal
// opens on it at the image's index with the catalog loaded.
func requireOpens(t *testing.T, fs vfs.FS, cfg restoreConfig, index uint64) {
	t.Helper()
	require.Empty(t, checkDir(fs, cfg.Dir))
	tree := catalog.New()
	st, err := image.Open(image.Config{Dir: cfg.Dir, FS: fs, State: tree})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	net := journaltest.NewNetwork(1)
	j, err := journal.Open(ctx, journal.Config{ID: cfg.ID, Dir: cfg.Dir, Addr: cfg.Addr, FS: fs, StateMachine: tree, Snapshots: st, Transport: net.Transport(cfg.Addr)})
	require.NoError(t, err)
	defer func() { require.NoError(t, j.Close()) }()
	if index > 0 {
		require.Equal(t, index, j.Status().Applied)
	}
	_, ok := tree.Get("/db7")
	require.True(t, ok, "the image's catalog is loaded")
}
