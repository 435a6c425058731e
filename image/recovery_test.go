package image

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// writeFileFS writes data to path on fs.
func writeFileFS(t *testing.T, fs vfs.FS, path string, data []byte) {
	t.Helper()
	require.NoError(t, fs.MkdirAll(fs.PathDir(path), 0o755))
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	_, err = f.Write(bytes.Clone(data)) // a vfs.File may modify what it is given
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// Rewrite copies an image under a new header; a corrupt source leaves no
// image, not even one whose own checksum is valid.
func TestRewrite(t *testing.T) {
	fs := vfs.NewMem()
	src := encodeImage(t, testHeader, []byte("the body"))
	writeFileFS(t, fs, "/src/good.img", src)
	bad := append([]byte(nil), src...)
	bad[len(bad)-25] ^= 1 // the body's last byte
	writeFileFS(t, fs, "/src/bad.img", bad)

	s := openStore(t, fs, "/d", newKV(), func(c *Config) { c.ClusterID = "new" })
	h := Header{ClusterID: "new", Index: testHeader.Index, Term: testHeader.Term, Membership: []byte("alone")}
	_, err := s.Rewrite(context.Background(), "/src/bad.img", h)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "/src/bad.img")
	idx, err := s.Indexes()
	require.NoError(t, err)
	require.Empty(t, idx, "no image from a corrupt source")
	l, err := ListDir(fs, "/d")
	require.NoError(t, err)
	require.Empty(t, l.Temps)

	info, err := s.Rewrite(context.Background(), "/src/good.img", h)
	require.NoError(t, err)
	got, err := ReadFile(fs, s.path(info.Name), nil)
	require.NoError(t, err)
	require.Equal(t, "new", got.ClusterID)
	require.Equal(t, []byte("alone"), got.Membership)
	require.Equal(t, testHeader.Index, got.Index)
}

// Backup writes a member's newest image, byte for byte, and nothing when
// the member refuses the token.
func TestBackup(t *testing.T) {
	mem := vfs.NewMem()
	s := openStore(t, mem, "/node", newKV(), func(c *Config) { c.Token = "secret" })
	info := writeKV(t, s, 50)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	out := vfs.NewMem()
	_, err := Backup(context.Background(), BackupConfig{Addr: srv.URL, Out: "/b.img", FS: out, Token: "wrong"})
	require.ErrorIs(t, err, ErrUnauthorized)
	_, err = out.Stat("/b.img")
	require.Error(t, err)

	got, err := Backup(context.Background(), BackupConfig{Addr: srv.URL, Out: "/b.img", FS: out, Token: "secret",
		Header: http.Header{"Authorization": {"Bearer secret"}}})
	require.NoError(t, err)
	require.Equal(t, info.Index, got.Index)
	require.Equal(t, info.CRC, got.CRC)
	_, err = ReadFile(out, "/b.img", nil)
	require.NoError(t, err)
	_, err = out.Stat("/b.img.tmp")
	require.Error(t, err, "no temporary file left")
}
