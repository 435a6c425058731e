package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
)

// result is one metactl run.
type result struct {
	code           int
	stdout, stderr string
}

// metactl runs the command in-process against the real filesystem.
func metactl(t *testing.T, args ...string) result {
	t.Helper()
	return metactlOn(t, vfs.Default, args...)
}

func metactlOn(t *testing.T, fs vfs.FS, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, env{fs: fs, stdout: &out, stderr: &errb})
	return result{code, out.String(), errb.String()}
}

// dataDir is a data dir written by a real single-node frontend: writes
// nodes /db0 … /db<n-1> (kind database, attr n), an image after the first
// imaged of them, and the rest in the log after it.
type dataDir struct {
	dir   string
	image uint64 // the image's index
	last  uint64 // the last write's index
}

func newDataDir(t *testing.T, n, imaged int) dataDir {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "node1")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	fe, err := frontend.Start(ctx, frontend.Config{
		ID: 1, Dir: dir, Addr: "127.0.0.1:0", Bootstrap: true, Insecure: true,
		HeartbeatInterval: time.Hour, CheckpointEntries: 1 << 40, CheckpointInterval: time.Hour,
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, fe.Close()) }()
	d := dataDir{dir: dir}
	for i := range n {
		if i == imaged {
			info, err := fe.Checkpointer().Checkpoint(ctx)
			require.NoError(t, err)
			d.image = info.Index
		}
		data, err := catalog.Batch{Ops: []catalog.Op{{
			Type: catalog.OpCreate, Path: fmt.Sprintf("/db%d", i), Kind: "database",
			Set: map[string]catalog.Value{"n": catalog.Int(int64(i))},
		}}}.Encode()
		require.NoError(t, err)
		// Start returned once this frontend registered itself: it leads.
		idx, _, err := fe.Journal().Propose(ctx, data)
		require.NoError(t, err)
		d.last = idx
	}
	if imaged >= n {
		info, err := fe.Checkpointer().Checkpoint(ctx)
		require.NoError(t, err)
		d.image = info.Index
	}
	return d
}

func (d dataDir) imagePath() string {
	return filepath.Join(d.dir, "image", fmt.Sprintf("image.%d", d.image))
}

// jsonLines splits output into its lines.
func jsonLines(s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
