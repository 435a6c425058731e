package image

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

func TestLoadAtOrBefore(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, "/data", newKV())
	for _, n := range []uint64{100, 200, 300} {
		writeKV(t, s, n)
	}
	corruptFile(t, fs, "/data/image/image.300")
	for _, c := range []struct {
		at, want uint64
	}{
		{at: 99, want: 0},    // no image that old: the empty state
		{at: 100, want: 100}, // an image exactly at the index
		{at: 250, want: 200},
		{at: 1000, want: 200}, // the corrupt image.300 is passed over
	} {
		st := newKV()
		info, err := s.LoadAtOrBefore(t.Context(), st, c.at)
		require.NoError(t, err, "at %d", c.at)
		require.Equal(t, c.want, info.Index, "at %d", c.at)
		if c.want == 0 {
			require.Empty(t, st.snapshot(), "at %d", c.at)
		} else {
			require.Equal(t, expectedKV(c.want), st.snapshot(), "at %d", c.at)
		}
	}
	// When every image old enough is unusable the state is not the empty
	// one: an error, naming the file.
	corruptFile(t, fs, "/data/image/image.100")
	_, err := s.LoadAtOrBefore(t.Context(), newKV(), 150)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "image.100")
}
