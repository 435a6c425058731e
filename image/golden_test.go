package image

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/internal/golden"
)

// goldenImagePath is the image file (format version 1) of goldenCatalog.
const goldenImagePath = "testdata/golden/image-v1.bin"

// goldenHeader is the header of the golden image file; its membership blob
// is opaque to this package.
var goldenHeader = Header{
	ClusterID:  "golden-cluster",
	Index:      4,
	Term:       2,
	Membership: []byte(`{"v":1,"index":4,"voters":[1],"members":{"1":{"id":1,"addr":"node1"}},"dedupe_window":10000}`),
}

// goldenCatalog is the catalog the golden image file holds: a node with
// an attribute of every value type, a child, and a secondary index.
func goldenCatalog(t *testing.T) *catalog.Tree {
	t.Helper()
	tree := catalog.New()
	data, err := catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/db", Kind: "database", Set: map[string]catalog.Value{
			"owner": catalog.String("ann"), "quota": catalog.Int(-5), "on": catalog.Bool(true), "blob": catalog.Bytes([]byte{0, 255}),
		}},
		{Type: catalog.OpCreate, Path: "/db/t1", Kind: "table", Set: map[string]catalog.Value{"rows": catalog.Int(1 << 40)}},
		{Type: catalog.OpCreateIndex, Kind: "table", Attr: "rows"},
	}}.Encode()
	require.NoError(t, err)
	require.NoError(t, tree.Apply(goldenHeader.Index, data).(*catalog.Result).Err)
	return tree
}

// An image file (format version 1) of a fixed header and catalog is the
// bytes checked in, and those bytes read back, checksums verified, to that
// header and catalog, for ever.
func TestImageFileFormatMatchesItsGoldenFile(t *testing.T) {
	want := goldenCatalog(t)
	var buf bytes.Buffer
	_, _, err := WriteTo(&buf, goldenHeader, want.Save)
	require.NoError(t, err)
	golden.Check(t, goldenImagePath, buf.Bytes())

	got := catalog.New()
	info, err := ReadFile(nil, goldenImagePath, func(r io.Reader) error { return got.Load(r) })
	require.NoError(t, err)
	require.Equal(t, uint16(FormatVersion), info.Version)
	require.Equal(t, goldenHeader.ClusterID, info.ClusterID)
	require.Equal(t, goldenHeader.Index, info.Index)
	require.Equal(t, goldenHeader.Term, info.Term)
	require.Equal(t, goldenHeader.Membership, info.Membership)
	require.Equal(t, int64(len(golden.Read(t, goldenImagePath))), info.Size)

	db, ok := got.Get("/db")
	require.True(t, ok)
	require.Equal(t, "database", db.Kind)
	require.Equal(t, map[string]catalog.Value{
		"owner": catalog.String("ann"), "quota": catalog.Int(-5), "on": catalog.Bool(true), "blob": catalog.Bytes([]byte{0, 255}),
	}, db.Attrs)
	found := got.Find("table", "rows", catalog.Int(1<<40))
	require.Len(t, found, 1)
	require.Equal(t, "/db/t1", found[0].Path)
	_, wd := want.Digest()
	_, gd := got.Digest()
	require.Equal(t, wd, gd)
}
