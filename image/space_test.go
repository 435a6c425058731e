package image

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/tmpfs"
)

// TestImageWriteOnAFullDisk: on a real filesystem that fills up, an image
// write fails with ENOSPC, leaves no half-written file, and does not halt
// the Store (a full disk is not a lying fsync); once space is freed the
// same Store writes, and the dir reopens with its images.
func TestImageWriteOnAFullDisk(t *testing.T) {
	mnt := tmpfs.Mount(t, 8<<20)
	dir := filepath.Join(mnt, "data")
	s := openStore(t, vfs.Default, dir, newKV())
	writeKV(t, s, 10)

	filler := filepath.Join(mnt, "filler")
	tmpfs.Fill(t, filler)
	_, err := s.Write(context.Background(), Header{Index: 20, Term: 1, Membership: []byte("m")}, func(w io.Writer) error {
		_, err := w.Write(make([]byte, 2<<20))
		return err
	})
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorContains(t, err, filepath.Join(dir, "image", ckptTmpName))
	require.NoError(t, s.Halted(), "ENOSPC fails the write, not the Store")
	names, err := vfs.Default.List(s.Dir())
	require.NoError(t, err)
	require.NotContains(t, names, ckptTmpName, "no half-written image is left")

	require.NoError(t, vfs.Default.Remove(filler))
	writeKV(t, s, 30)
	require.NoError(t, s.Close())

	s2 := openStore(t, vfs.Default, dir, newKV())
	idx, err := s2.Indexes()
	require.NoError(t, err)
	require.Equal(t, []uint64{30, 10}, idx)
}

// TestFetchOnAFullDisk: a download that meets ENOSPC on a real filesystem
// fails with it, leaves no partial download, installs nothing and does
// not halt the Store; once space is freed the same fetch succeeds.
func TestFetchOnAFullDisk(t *testing.T) {
	ctx := context.Background()
	src := newKV()
	for i := uint64(1); i <= 4000; i++ {
		src.Apply(i, fmt.Appendf(nil, "k%05d=%s", i, strings.Repeat("x", 1000)))
	}
	from := openStore(t, vfs.Default, t.TempDir(), newKV())
	info, err := from.Write(ctx, Header{Index: 4000, Term: 1, Membership: []byte("m")}, src.Save)
	require.NoError(t, err)
	srv := httptest.NewServer(from.Handler())
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")

	mnt := tmpfs.Mount(t, 8<<20)
	live := newKV()
	to := openStore(t, vfs.Default, filepath.Join(mnt, "data"), live)
	filler := filepath.Join(mnt, "filler")
	tmpfs.Fill(t, filler)
	require.NoError(t, os.Truncate(filler, fillerKeep(t, filler, info.Size/2)))

	err = to.Fetch(ctx, addr, 4000)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NoError(t, to.Halted(), "ENOSPC fails the download, not the Store")
	names, err := vfs.Default.List(to.Dir())
	require.NoError(t, err)
	for _, name := range names {
		require.False(t, strings.HasPrefix(name, "image."), "no partial download is left: %v", names)
	}
	require.Empty(t, live.snapshot(), "nothing installed")

	require.NoError(t, os.Remove(filler))
	require.NoError(t, to.Fetch(ctx, addr, 4000))
	require.NoError(t, to.Install(ctx, 4000))
	require.Equal(t, src.snapshot(), live.snapshot())
}

// fillerKeep returns the filler's size less free bytes, so that free bytes
// become available once it is truncated to it.
func fillerKeep(t *testing.T, filler string, free int64) int64 {
	t.Helper()
	st, err := os.Stat(filler)
	require.NoError(t, err)
	return max(0, st.Size()-free)
}
