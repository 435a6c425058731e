package catalog

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog/internal/imagefmt"
	"github.com/metatree/metatree/catalog/internal/layout"
)

// loadAllocates loads img and returns the tree (nil on error), the error,
// and the bytes allocated meanwhile.
func loadAllocates(img []byte) (*Tree, error, uint64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr := New()
	err := tr.Load(bytes.NewReader(img))
	runtime.ReadMemStats(&after)
	if err != nil {
		tr = nil
	}
	return tr, err, after.TotalAlloc - before.TotalAlloc
}

// TestLoadAllocatesByItsInput: an image of a few nodes allocates about
// as much as any small image, however large their ids are; the tree it
// gives finds its nodes and saves the same bytes.
func TestLoadAllocatesByItsInput(t *testing.T) {
	_, err, small := loadAllocates(handImage([]imgRec{{id: 1}, {2, 1, "a", "k"}}))
	require.NoError(t, err)
	for _, id := range []uint64{1 << 20, 1 << 34, layout.IDLimit - 2} {
		img := handImage([]imgRec{{id: 1}, {2, 1, "a", "k"}, {id, 2, "b", "k"}})
		tr, err, n := loadAllocates(img)
		require.NoError(t, err, "node id %d", id)
		require.Less(t, n, small+1<<20, "bytes allocated loading a %d-byte image with node id %d (a two-node image: %d)", len(img), id, small)
		nd, ok := tr.GetID(id)
		require.True(t, ok)
		require.Equal(t, "/a/b", nd.Path)
		require.Equal(t, img, saveBytes(t, tr))
	}
	// A block that claims the largest length allowed and ends at once.
	_, err, n := loadAllocates([]byte(imagefmt.Magic + "\x01\x80\x80\x80\x04"))
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "truncated")
	require.Less(t, n, small+1<<20, "bytes allocated for a block that claims 8 MiB")
}

// TestLoadRefusesANextIDNoTreeReaches: a header whose next id is beyond
// the ids a tree can hand out is refused as corrupt, naming the next id.
func TestLoadRefusesANextIDNoTreeReaches(t *testing.T) {
	imgs := map[uint64][]byte{
		// The next id one above the largest id the records name.
		1<<44 + 1: handImage([]imgRec{{id: 1}, {2, 1, "a", "k"}, {1 << 44, 2, "b", "k"}}),
	}
	for _, next := range []uint64{layout.IDLimit + 1, 1 << 62, 1<<64 - 1} {
		imgs[next] = handImageNext([]imgRec{{id: 1}, {2, 1, "a", "k"}}, next)
	}
	for next, img := range imgs {
		for _, careful := range []bool{false, true} {
			_, err := readImageWith(bytes.NewReader(img), true, careful)
			require.ErrorIs(t, err, ErrCorrupt, "next id %d", next)
			require.ErrorContains(t, err, "next id")
		}
	}
}

// TestCreatePastTheLastIDFails: a tree whose next id is the last one
// below idLimit creates one more node, then refuses creates with
// ErrCapacity (the batch changes nothing); its image, holding ids far
// apart, saves (walking only the ids in use) and loads back.
func TestCreatePastTheLastIDFails(t *testing.T) {
	tr := New()
	require.NoError(t, tr.Load(bytes.NewReader(handImageNext([]imgRec{{id: 1}, {2, 1, "a", "k"}}, layout.IDLimit-1))))
	res := applyBatch(t, tr, 11, Batch{Ops: []Op{{Type: OpCreate, Path: "/a/last", Kind: "k"}}})
	require.NoError(t, res.Err)
	require.Equal(t, []uint64{layout.IDLimit - 1}, res.IDs)
	before := tr.Usage()
	res = applyBatch(t, tr, 12, Batch{Ops: []Op{
		{Type: OpDelete, Path: "/a/last"},
		{Type: OpCreate, Path: "/a/next", Kind: "k"},
	}})
	require.ErrorIs(t, res.Err, ErrCapacity)
	require.Equal(t, before, tr.Usage())
	n, ok := tr.GetID(layout.IDLimit - 1)
	require.True(t, ok)
	require.Equal(t, "/a/last", n.Path)

	img := saveBytes(t, tr)
	c := New()
	require.NoError(t, c.Load(bytes.NewReader(img)))
	require.Equal(t, img, saveBytes(t, c))
	n, ok = c.GetID(layout.IDLimit - 1)
	require.True(t, ok)
	require.Equal(t, "/a/last", n.Path)
	_, ok = c.GetID(layout.IDLimit)
	require.False(t, ok)
	_, ok = c.GetID(1<<64 - 1)
	require.False(t, ok)
}
