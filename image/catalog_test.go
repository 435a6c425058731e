package image

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/metatree/metatree/catalog"
	"github.com/stretchr/testify/require"
)

var _ State = (*catalog.Tree)(nil)

// catalogBatches returns n encoded catalog batches: databases, tables,
// attribute updates, a rename, a delete and a failing conditional batch.
func catalogBatches(t testing.TB, n int) [][]byte {
	t.Helper()
	var out [][]byte
	add := func(ops ...catalog.Op) {
		d, err := catalog.Batch{Ops: ops}.Encode()
		require.NoError(t, err)
		out = append(out, d)
	}
	add(catalog.Op{Type: catalog.OpCreateIndex, Kind: "table", Attr: "owner"})
	for i := 0; len(out) < n; i++ {
		db := fmt.Sprintf("/db%d", i%7)
		switch i % 5 {
		case 0:
			if i < 7*5 {
				add(catalog.Op{Type: catalog.OpCreate, Path: db, Kind: "database"})
				continue
			}
			add(catalog.Op{Type: catalog.OpUpdate, Path: db, Set: map[string]catalog.Value{"gen": catalog.Int(int64(i))}})
		case 1, 2:
			add(catalog.Op{Type: catalog.OpCreate, Path: fmt.Sprintf("%s/t%d", db, i), Kind: "table", Set: map[string]catalog.Value{
				"owner": catalog.String(fmt.Sprintf("u%d", i%3)), "rows": catalog.Int(int64(i * 10)), "hot": catalog.Bool(i%2 == 0),
			}})
		case 3:
			add(catalog.Op{Type: catalog.OpMove, Path: fmt.Sprintf("%s/t%d", db, i-2), To: fmt.Sprintf("%s/moved%d", db, i)})
		case 4:
			// Fails (the node exists): applied as a no-op everywhere.
			add(catalog.Op{Type: catalog.OpCreate, Path: fmt.Sprintf("%s/t%d", db, i-3), Kind: "table", Cond: catalog.Cond{Absent: true}})
		}
	}
	return out[:n]
}

type catalogNode struct {
	fs    vfs.FS
	live  *catalog.Tree
	store *Store
	j     *kvJournal
	cp    *Checkpointer
}

func newCatalogNode(t testing.TB) *catalogNode {
	n := &catalogNode{fs: vfs.NewMem(), live: catalog.New()}
	n.store = openStore(t, n.fs, "/data", n.live)
	n.j = newKVJournal(n.live)
	cp, err := NewCheckpointer(CheckpointerConfig{
		Store: n.store, Journal: n.j, Applied: n.j.Index,
		NewState: func() State { return catalog.New() },
		Logger:   testLogger(t),
	})
	require.NoError(t, err)
	t.Cleanup(func() { cp.Close() })
	n.cp = cp
	return n
}

func saveBytes(t testing.TB, s State) []byte {
	var b bytes.Buffer
	require.NoError(t, s.Save(&b))
	return b.Bytes()
}

// Three nodes that applied the same entries write byte-identical images at
// the same index, whose content is the live catalog's.
func TestCatalogImagesIdenticalOnThreeNodes(t *testing.T) {
	ctx := context.Background()
	batches := catalogBatches(t, 400)
	var files [][]byte
	for range 3 {
		n := newCatalogNode(t)
		for _, b := range batches[:250] {
			n.j.appendData(b)
		}
		_, err := n.cp.Checkpoint(ctx)
		require.NoError(t, err)
		for _, b := range batches[250:] {
			n.j.appendData(b)
		}
		info, err := n.cp.Checkpoint(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(400), info.Index)
		files = append(files, readAll(t, n.fs, "/data/image/image.400"))

		shadow := catalog.New()
		_, err = n.store.loadInto(shadow, info.Name, true)
		require.NoError(t, err)
		require.Equal(t, saveBytes(t, n.live), saveBytes(t, shadow), "the image holds the live catalog")
	}
	require.Equal(t, files[0], files[1])
	require.Equal(t, files[0], files[2])
}

// servedCatalogImage starts a catalog node whose image of its first n
// batches is served over HTTP, and returns it and the server's address.
func servedCatalogImage(t *testing.T, n int) (*catalogNode, string) {
	src := newCatalogNode(t)
	for _, b := range catalogBatches(t, n) {
		src.j.appendData(b)
	}
	_, err := src.cp.Checkpoint(context.Background())
	require.NoError(t, err)
	return src, newServer(t, src.store)
}

// A node restores a peer's catalog image over HTTP into its live catalog.
func TestCatalogRestoreOverHTTP(t *testing.T) {
	ctx := context.Background()
	src, srv := servedCatalogImage(t, 300)

	dst := newCatalogNode(t)
	for _, b := range catalogBatches(t, 20) {
		dst.j.appendData(b)
	}
	before := saveBytes(t, dst.live)
	require.NoError(t, dst.store.Fetch(ctx, srv, 300))
	// The catalog is a Stager: Fetch decoded the image as it arrived, and
	// the live catalog is untouched until Install.
	dst.store.mu.Lock()
	st := dst.store.mu.staged
	dst.store.mu.Unlock()
	require.NotNil(t, st, "the download was decoded while it streamed")
	require.Equal(t, uint64(300), st.index)
	require.Equal(t, before, saveBytes(t, dst.live), "Fetch leaves the live catalog alone")
	require.NoError(t, dst.store.Install(ctx, 300))
	require.Equal(t, saveBytes(t, src.live), saveBytes(t, dst.live))
	dst.store.mu.Lock()
	require.Nil(t, dst.store.mu.staged, "Install consumed the staged image")
	dst.store.mu.Unlock()
	require.Equal(t, uint64(300), dst.live.Index())
	_, ok := dst.live.Get("/db1")
	require.True(t, ok)
}

// An image whose file checks pass (header, checksum) but whose catalog body
// does not decode: Fetch keeps the file (it is what the peer wrote), no
// staged copy exists, and Install reports the corrupt body and leaves the
// live catalog as it was.
func TestCatalogRestoreOfUndecodableBody(t *testing.T) {
	ctx := context.Background()
	head, err := encodeHeader(Header{ClusterID: "cluster-a", Index: 50, Term: 1})
	require.NoError(t, err)
	body := []byte("MTCATIMG\x01 this is not a catalog body")
	sum := newCRC()
	sum.Write(head)
	sum.Write(body)
	file := append(append(append([]byte{}, head...), body...), encodeTrailer(sum, uint64(len(body)))...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setImageHeaders(w, file, 50)
		w.Write(file)
	}))
	t.Cleanup(srv.Close)

	dst := newCatalogNode(t)
	for _, b := range catalogBatches(t, 20) {
		dst.j.appendData(b)
	}
	before := saveBytes(t, dst.live)
	require.NoError(t, dst.store.Fetch(ctx, srv.URL, 50))
	dst.store.mu.Lock()
	require.Nil(t, dst.store.mu.staged, "nothing staged from a body that does not decode")
	dst.store.mu.Unlock()
	err = dst.store.Install(ctx, 50)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, err, catalog.ErrCorrupt)
	require.Equal(t, before, saveBytes(t, dst.live), "the live catalog is unchanged")
}

// A catalog image whose file checks pass but whose body is of a catalog
// format this build does not read (written by a newer binary) is an
// unknown version, not a corrupt file: Install says so, and LoadLatest
// falls back to an older image but leaves the newer one where it is, for
// the binary that reads it.
func TestCatalogImageOfANewerBodyFormatIsAnUnknownVersion(t *testing.T) {
	ctx := context.Background()
	body := []byte("MTCATIMG\x7f a body of a format from the future")
	newer := func(index uint64) []byte {
		head, err := encodeHeader(Header{ClusterID: "cluster-a", Index: index, Term: 1, Membership: []byte("m")})
		require.NoError(t, err)
		sum := newCRC()
		sum.Write(head)
		sum.Write(body)
		return append(append(append([]byte{}, head...), body...), encodeTrailer(sum, uint64(len(body)))...)
	}

	t.Run("install", func(t *testing.T) {
		file := newer(50)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			setImageHeaders(w, file, 50)
			w.Write(file)
		}))
		t.Cleanup(srv.Close)
		dst := newCatalogNode(t)
		require.NoError(t, dst.store.Fetch(ctx, srv.URL, 50))
		err := dst.store.Install(ctx, 50)
		require.ErrorIs(t, err, ErrUnknownVersion)
		require.ErrorIs(t, err, catalog.ErrUnknownVersion)
		require.NotErrorIs(t, err, ErrCorrupt)
	})

	t.Run("load latest", func(t *testing.T) {
		fs := vfs.NewMem()
		s := openStore(t, fs, "/data", catalog.New(), func(c *Config) { c.ClusterID = "cluster-a" })
		older := catalog.New()
		_, err := s.Write(ctx, Header{Index: 100, Term: 1, Membership: []byte("m")}, older.Save)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		writeAll(t, fs, "/data/image/image.200", newer(200))

		live := catalog.New()
		s = openStore(t, fs, "/data", live, func(c *Config) { c.ClusterID = "cluster-a" })
		idx, _, err := s.LoadLatest(ctx, 50)
		require.NoError(t, err)
		require.Equal(t, uint64(100), idx, "falls back to the image it reads")
		names, err := fs.List("/data/image")
		require.NoError(t, err)
		require.Contains(t, names, "image.200", "the newer image is kept under its name")
	})
}
