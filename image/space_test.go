package image

import (
	"context"
	"io"
	"path/filepath"
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
