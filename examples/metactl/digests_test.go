package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/catalog/catalogtest"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/internal/metricstest"
)

// newCheckedDataDir is a data dir written by a real single-node frontend
// whose log holds check marks after its image: writes, an image, more
// writes, then two more comparisons (a mark after the image compared).
func newCheckedDataDir(t *testing.T) dataDir {
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
	write := func(i int) {
		data, err := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: fmt.Sprintf("/db%d", i), Kind: "database",
			Set: map[string]catalog.Value{"n": catalog.Int(int64(i))}}}}.Encode()
		require.NoError(t, err)
		d.last, _, err = fe.Journal().Propose(ctx, data)
		require.NoError(t, err)
	}
	for i := range 5 {
		write(i)
	}
	info, err := fe.Checkpointer().Checkpoint(ctx)
	require.NoError(t, err)
	d.image = info.Index
	write(5)
	checks := func() float64 {
		return metricstest.Scrape(t, fe.Journal().Collector())["metatree_journal_consistency_checks_total"]
	}
	before := checks()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for checks() < before+2 {
		select {
		case <-ctx.Done():
			t.Fatalf("no consistency check ran: %v", ctx.Err())
		case <-tick.C:
		}
	}
	return d
}

// doctorImage rewrites the image at path with attribute "n" of /db0
// changed: the same header, a well-formed body and valid checksums.
func doctorImage(t *testing.T, path string) {
	t.Helper()
	fs := vfs.Default
	tree := catalog.New()
	info, err := image.ReadFile(fs, path, func(r io.Reader) error { return tree.Load(r) })
	require.NoError(t, err)
	require.NoError(t, catalogtest.SetAttr(tree, "/db0", "n", catalog.Int(1000)))
	f, err := fs.Create(path+".doctored", vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	_, _, err = image.WriteTo(f, info.Header, tree.Save)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, fs.Rename(path+".doctored", path))
}

// check compares the dir's catalog with the digests its log recorded: a
// healthy dir passes and says how many marks it compared at; one whose
// image had an attribute changed (valid checksums) exits 1 naming the
// mark's index and both digests, while `image verify` still passes.
func TestCheckComparesTheCatalogWithTheDigestsTheLogRecorded(t *testing.T) {
	d := newCheckedDataDir(t)
	r := metactl(t, "check", d.dir)
	require.Equal(t, 0, r.code, r.stderr)
	var out checkJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.True(t, out.OK)
	require.NotNil(t, out.Digests)
	require.Equal(t, d.image, out.Digests.Image)
	require.GreaterOrEqual(t, out.Digests.Compared, 1, "a mark after the image compared")

	doctorImage(t, d.imagePath())
	require.Equal(t, 0, metactl(t, "image", "verify", d.imagePath()).code, "the doctored image's checksums are valid")
	r = metactl(t, "check", d.dir)
	require.Equal(t, 1, r.code, r.stdout)
	require.Regexp(t, `at the check mark at index \d+ the catalog \(image \d+ and the log after it\) has digest [0-9a-f]{32} \(format 2\), and voters \[1\] recorded [0-9a-f]{32}`, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.False(t, out.OK)

	r = metactl(t, "check", "-dedupe-window", "x", d.dir)
	require.Equal(t, 2, r.code, r.stderr)
}
