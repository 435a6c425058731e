package catalog_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/internal/golden"
)

// goldenBatches are the batches of each format version the golden files
// hold: every operation type, every condition and every value type.
var goldenBatches = map[int]catalog.Batch{
	catalog.BatchV1: {Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/db", Kind: "database", Cond: catalog.Cond{Absent: true}, Set: map[string]catalog.Value{
			"owner": catalog.String("ann"), "quota": catalog.Int(-5), "on": catalog.Bool(true), "blob": catalog.Bytes([]byte{0, 255}),
		}},
		{Type: catalog.OpUpdate, Path: "/db", Kind: "database", Set: map[string]catalog.Value{"quota": catalog.Int(1 << 40)},
			Unset: []string{"blob", "on"}, Cond: catalog.Cond{Modified: 7}},
		{Type: catalog.OpMove, Path: "/db", To: "/db2", Cond: catalog.Cond{Exists: true}},
		{Type: catalog.OpCheck, Path: "/db2"},
		{Type: catalog.OpDelete, Path: "/db2", Recursive: true},
		{Type: catalog.OpCreateIndex, Kind: "replica", Attr: "worker"},
		{Type: catalog.OpDropIndex, Kind: "replica", Attr: "worker"},
	}},
	catalog.BatchV2: {Ops: []catalog.Op{
		{Type: catalog.OpUpdate, Path: "/jobs/7", Set: map[string]catalog.Value{"state": catalog.String("done")},
			Cond: catalog.Cond{Match: map[string]catalog.Value{"state": catalog.String("running"), "try": catalog.Int(2)}}},
		{Type: catalog.OpCheck, Path: "/jobs/8", Cond: catalog.Cond{Match: map[string]catalog.Value{"ok": catalog.Bool(false), "sum": catalog.Bytes([]byte{1})}}},
	}},
	catalog.BatchV3: {Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/tasks/t1", Kind: "task", Set: map[string]catalog.Value{"state": catalog.String("new")},
			Owner: catalog.Owner{Path: "/_cluster/members/7", Version: 41}},
		{Type: catalog.OpCreate, Path: "/locks/l1", Kind: "lock", Cond: catalog.Cond{Absent: true},
			Owner: catalog.Owner{Path: "/_cluster/members/7", Version: 41, Orphan: true}},
	}},
	// Version 4 encodes as version 3; it changes how Quota.Exempt judges
	// the batch (a member record's transition here).
	catalog.BatchV4: {Ops: []catalog.Op{
		{Type: catalog.OpUpdate, Path: "/_cluster/members/7", Set: map[string]catalog.Value{"status": catalog.String("dead")},
			Cond: catalog.Cond{Match: map[string]catalog.Value{"epoch": catalog.String("e1")}}},
		{Type: catalog.OpCreate, Path: "/_cluster/members/7/lock", Kind: "lock",
			Owner: catalog.Owner{Path: "/_cluster/members/7", Version: 41, Orphan: true}},
	}},
}

// Each batch format version encodes its batch to the bytes checked in,
// and those bytes decode to the batch, for ever.
func TestBatchFormatsMatchTheirGoldenFiles(t *testing.T) {
	for v, b := range goldenBatches {
		path := fmt.Sprintf("testdata/golden/batch-v%d.bin", v)
		t.Run(path, func(t *testing.T) {
			got, err := b.EncodeVersion(v)
			require.NoError(t, err)
			golden.Check(t, path, got)

			decoded, err := catalog.DecodeBatch(golden.Read(t, path))
			require.NoError(t, err)
			require.Equal(t, b, decoded)
		})
	}
}

// goldenTree is the catalog the image body golden file holds: nodes of
// several depths with every value type, and a secondary index.
func goldenTree(t *testing.T) *catalog.Tree {
	t.Helper()
	tree := catalog.New()
	batches := []catalog.Batch{
		{Ops: []catalog.Op{
			{Type: catalog.OpCreate, Path: "/db", Kind: "database", Set: map[string]catalog.Value{
				"owner": catalog.String("ann"), "quota": catalog.Int(-5), "on": catalog.Bool(true), "blob": catalog.Bytes([]byte{0, 255}),
			}},
			{Type: catalog.OpCreate, Path: "/db/t1", Kind: "table", Set: map[string]catalog.Value{"rows": catalog.Int(1 << 40)}},
			{Type: catalog.OpCreate, Path: "/db/t2", Kind: "table", Set: map[string]catalog.Value{"off": catalog.Bool(false)}},
			{Type: catalog.OpCreateIndex, Kind: "table", Attr: "rows"},
		}},
		{Ops: []catalog.Op{
			{Type: catalog.OpUpdate, Path: "/db/t1", Set: map[string]catalog.Value{"name": catalog.String("orders")}},
			{Type: catalog.OpCreate, Path: "/w", Kind: "dir"},
		}},
	}
	for i, b := range batches {
		data, err := b.Encode()
		require.NoError(t, err)
		r := tree.Apply(uint64(3+2*i), data).(*catalog.Result)
		require.NoError(t, r.Err)
	}
	return tree
}

// The image body (version 1) of a fixed catalog is the bytes checked in,
// and those bytes load to that catalog, for ever.
func TestImageBodyFormatMatchesItsGoldenFile(t *testing.T) {
	want := goldenTree(t)
	got := imageBodyRoundTrip(t, "testdata/golden/image-body-v1.bin", want)
	require.Equal(t, uint64(5), got.Index())
	for _, p := range []string{"/", "/db", "/db/t1", "/db/t2", "/w"} {
		w, ok := want.Get(p)
		require.True(t, ok, p)
		g, ok := got.Get(p)
		require.True(t, ok, p)
		require.Equal(t, w, g, p)
	}
	db, _ := got.Get("/db")
	require.Equal(t, map[string]catalog.Value{
		"owner": catalog.String("ann"), "quota": catalog.Int(-5), "on": catalog.Bool(true), "blob": catalog.Bytes([]byte{0, 255}),
	}, db.Attrs)
	require.True(t, got.HasIndex("table", "rows"))
	found := got.Find("table", "rows", catalog.Int(1<<40))
	require.Len(t, found, 1)
	require.Equal(t, "/db/t1", found[0].Path)
	_, wd := want.Digest()
	_, gd := got.Digest()
	require.Equal(t, wd, gd)
}

// goldenOwnedTree is goldenTree with nodes owned by a version of /w, one
// of them to be kept and marked orphaned when that version ends: the
// catalog the image body version 2 golden file holds.
func goldenOwnedTree(t *testing.T) *catalog.Tree {
	t.Helper()
	tree := goldenTree(t)
	w, ok := tree.Get("/w")
	require.True(t, ok)
	data, err := catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/w/job", Kind: "job", Set: map[string]catalog.Value{"try": catalog.Int(1)},
			Owner: catalog.Owner{Path: "/w", Version: w.Modified}},
		{Type: catalog.OpCreate, Path: "/db/lock", Kind: "lock",
			Owner: catalog.Owner{Path: "/w", Version: w.Modified, Orphan: true}},
	}}.EncodeVersion(catalog.BatchV3)
	require.NoError(t, err)
	r := tree.Apply(7, data).(*catalog.Result)
	require.NoError(t, r.Err)
	return tree
}

// The image body version 2 (ownerships) of a fixed catalog is the bytes
// checked in, and those bytes load to that catalog with its ownerships,
// for ever: the version's end deletes and orphan-marks on the loaded tree
// as on the one that wrote it.
func TestImageBodyWithOwnershipsMatchesItsGoldenFile(t *testing.T) {
	want := goldenOwnedTree(t)
	got := imageBodyRoundTrip(t, "testdata/golden/image-body-v2.bin", want)
	require.Equal(t, uint64(7), got.Index())
	_, wd := want.Digest()
	_, gd := got.Digest()
	require.Equal(t, wd, gd)
	end, err := catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpUpdate, Path: "/w", Set: map[string]catalog.Value{"gen": catalog.Int(2)}},
	}}.Encode()
	require.NoError(t, err)
	for _, tr := range []*catalog.Tree{want, got} {
		r := tr.Apply(9, end).(*catalog.Result)
		require.NoError(t, r.Err)
		_, ok := tr.Get("/w/job")
		require.False(t, ok, "the owned job outlived its owner's version")
		lock, ok := tr.Get("/db/lock")
		require.True(t, ok, "the orphan-marked lock is kept")
		require.Equal(t, catalog.String("9 "+catalog.OrphanOwnerChanged), lock.Attrs[catalog.OrphanedAttr])
	}
	_, wd = want.Digest()
	_, gd = got.Digest()
	require.Equal(t, wd, gd)
}

// imageBodyRoundTrip checks that want saves to the golden file at path
// and returns the tree that file loads to.
func imageBodyRoundTrip(t *testing.T, path string, want *catalog.Tree) *catalog.Tree {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, want.Save(&buf))
	golden.Check(t, path, buf.Bytes())
	got := catalog.New()
	require.NoError(t, got.Load(bytes.NewReader(golden.Read(t, path))))
	return got
}

// The digests of a fixed catalog, with ownerships and without, in every
// format are the text checked in, for ever: replicas of different
// releases compare them (format 1 below journal format version 5).
func TestDigestsOfAFixedCatalogMatchTheirGoldenFile(t *testing.T) {
	var out bytes.Buffer
	for _, c := range []struct {
		name string
		tree *catalog.Tree
	}{{"plain", goldenTree(t)}, {"owned", goldenOwnedTree(t)}} {
		for _, f := range []catalog.DigestFormat{catalog.DigestV1, catalog.DigestV2} {
			_, d, err := catalog.DigestOf(c.tree, f)
			require.NoError(t, err)
			fmt.Fprintf(&out, "%s format=%d %v\n", c.name, f, d)
		}
	}
	golden.Check(t, "testdata/golden/digests.txt", out.Bytes())
}
