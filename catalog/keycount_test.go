package catalog

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireSizeIsSum checks the tree's size against the sum of its live
// nodes' sizes.
func requireSizeIsSum(t testing.TB, tr *Tree) {
	t.Helper()
	s := tr.s
	var sum int64
	for slot := range s.NSlots {
		if r := s.At(slot); r.ID != 0 {
			sum += int64(s.nodeSize(s.Blob(r)))
		}
	}
	require.Equal(t, sum, s.size)
}

// applyBatch applies b at index and returns the result, whatever it is.
func applyBatch(t *testing.T, tr *Tree, index uint64, b Batch) *Result {
	t.Helper()
	data, err := b.Encode()
	require.NoError(t, err)
	return tr.Apply(index, data).(*Result)
}

// internAndFail applies, at index, a batch that sets every key in keys on
// a new node and then fails: it changes no node, but the tree has met the
// keys (and numbered them) on the way.
func internAndFail(t *testing.T, tr *Tree, index uint64, keys []string) {
	t.Helper()
	set := map[string]Value{}
	for _, k := range keys {
		set[k] = Int(1)
	}
	res := applyBatch(t, tr, index, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/interned", Kind: "tmp", Set: set},
		{Type: OpCheck, Path: "/missing", Cond: Cond{Exists: true}},
	}})
	require.ErrorIs(t, res.Err, ErrConflict)
	_, ok := tr.Get("/interned")
	require.False(t, ok)
}

func keyNames(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return ks
}

// reload returns a new tree loaded from an image of tr.
func reload(t *testing.T, tr *Tree) *Tree {
	t.Helper()
	var img bytes.Buffer
	require.NoError(t, tr.Save(&img))
	c := New()
	require.NoError(t, c.Load(&img))
	require.Equal(t, tr.Index(), c.Index())
	return c
}

// replayedAndLoaded returns a tree that replayed a log in which a failed
// batch met 200 keys before any node used one (so the keys the nodes use
// are numbered from 200 on), and a tree loaded from its image (which
// numbers the keys the nodes use from 0): the same replicated state.
func replayedAndLoaded(t *testing.T) (replayed, loaded *Tree, index uint64) {
	t.Helper()
	replayed = New()
	internAndFail(t, replayed, 1, keyNames("x", 200))
	ops := []Op{{Type: OpCreate, Path: "/d", Kind: "dir"}}
	for i := range 20 {
		set := map[string]Value{}
		for _, k := range keyNames("k", 10) {
			set[k] = String("v")
		}
		ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/d/n%02d", i), Kind: "file", Set: set})
	}
	require.NoError(t, applyBatch(t, replayed, 2, Batch{Ops: ops}).Err)
	return replayed, reload(t, replayed), 2
}

// TestUsageCountsOnlyReplicatedState: a replica that replayed the log and
// one that loaded an image at the same index report the same Usage, and
// decide a batch at the edge of the byte quota the same way.
func TestUsageCountsOnlyReplicatedState(t *testing.T) {
	replayed, loaded, index := replayedAndLoaded(t)
	require.Equal(t, replayed.Usage(), loaded.Usage())

	set := map[string]Value{}
	for _, k := range keyNames("k", 10) {
		set[k] = String("w")
	}
	grow := Batch{Ops: []Op{{Type: OpCreate, Path: "/d/more", Kind: "file", Set: set}}}
	// The quota lets the batch through on the loaded replica with no byte
	// to spare.
	probe := reload(t, loaded)
	before := probe.Usage()
	require.NoError(t, applyBatch(t, probe, index+1, grow).Err)
	q := Quota{MaxBytes: before.Bytes + (probe.Usage().Bytes - before.Bytes)}
	replayed.SetQuota(q)
	loaded.SetQuota(q)
	a := applyBatch(t, replayed, index+1, grow)
	b := applyBatch(t, loaded, index+1, grow)
	require.NoError(t, a.Err, "replayed replica")
	require.NoError(t, b.Err, "loaded replica")
	require.Equal(t, replayed.Usage(), loaded.Usage())

	// One byte less, and both refuse the next such batch.
	q.MaxBytes = replayed.Usage().Bytes + (probe.Usage().Bytes - before.Bytes) - 1
	replayed.SetQuota(q)
	loaded.SetQuota(q)
	grow.Ops[0].Path = "/d/evenmore"
	require.ErrorIs(t, applyBatch(t, replayed, index+2, grow).Err, ErrQuota)
	require.ErrorIs(t, applyBatch(t, loaded, index+2, grow).Err, ErrQuota)
	require.Equal(t, replayed.Usage(), loaded.Usage())
	requireSizeIsSum(t, replayed)
	requireSizeIsSum(t, loaded)
}

// fill sets keys on the node at path, in two batches of string values
// of size bytes in all.
func fill(t *testing.T, tr *Tree, index uint64, path string, keys []string, size int) uint64 {
	t.Helper()
	per := size / len(keys)
	for _, half := range [][]string{keys[:len(keys)/2], keys[len(keys)/2:]} {
		set := map[string]Value{}
		for _, k := range half {
			set[k] = String(strings.Repeat("v", per))
		}
		index++
		require.NoError(t, applyBatch(t, tr, index, Batch{Ops: []Op{{Type: OpUpdate, Path: path, Set: set}}}).Err)
	}
	return index
}

// largestAccepted finds the longest string value of key that an update of
// the node at path is accepted with (below hi), leaves the node holding
// it, and returns its length and the last index applied.
func largestAccepted(t *testing.T, tr *Tree, index uint64, path, key string, hi int) (int, uint64) {
	t.Helper()
	try := func(n int) error {
		index++
		return applyBatch(t, tr, index, Batch{Ops: []Op{{Type: OpUpdate, Path: path, Set: map[string]Value{key: String(strings.Repeat("v", n))}}}}).Err
	}
	lo := 0
	require.NoError(t, try(lo))
	require.ErrorIs(t, try(hi), ErrInvalid)
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if err := try(m); err == nil {
			lo = m
		} else {
			require.ErrorIs(t, err, ErrInvalid)
			hi = m
		}
	}
	require.NoError(t, try(lo))
	return lo, index
}

// TestBlobBoundCountsOnlyReplicatedState: the size bound on a node is
// the same on a replica that replayed the log (whose keys have two-byte
// numbers) and on one that loaded an image (one-byte numbers).
func TestBlobBoundCountsOnlyReplicatedState(t *testing.T) {
	replayed, loaded, index := replayedAndLoaded(t)
	keys := keyNames("k", 60)[10:]
	var edges []int
	for _, tr := range []*Tree{replayed, loaded} {
		i := fill(t, tr, index, "/d/n00", keys, MaxAttrsBytes-8<<10)
		n, _ := largestAccepted(t, tr, i, "/d/n00", "k999", MaxValueLen)
		edges = append(edges, n)
	}
	require.Equal(t, edges[0], edges[1], "the longest value accepted on the replayed and the loaded replica")
	require.Equal(t, replayed.Usage(), loaded.Usage())
}

// TestNodeAtTheBoundSavesAndLoads: a node as large as Apply accepts, with
// one-byte key numbers in the tree that applied it, is in an image that
// loads (where the same keys are numbered from 200 on, in two bytes), on
// the fast decoder and the careful one alike.
func TestNodeAtTheBoundSavesAndLoads(t *testing.T) {
	tr := New()
	big := keyNames("a", 50)
	internAndFail(t, tr, 1, big) // the big node's keys get numbers 0-49
	set := map[string]Value{}
	for _, k := range keyNames("z", 200) {
		set[k] = Int(1)
	}
	// The first node in the image uses 200 other keys, so the image's
	// dictionary numbers the big node's keys from 200 on.
	require.NoError(t, applyBatch(t, tr, 2, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/first", Kind: "k", Set: set},
		{Type: OpCreate, Path: "/big", Kind: "k"},
	}}).Err)
	index := fill(t, tr, 2, "/big", big[:49], MaxAttrsBytes-8<<10)
	_, index = largestAccepted(t, tr, index, "/big", big[49], MaxValueLen)

	img := saveBytes(t, tr)
	want, _ := tr.Get("/big")
	for _, careful := range []bool{false, true} {
		s, err := readImageWith(bytes.NewReader(img), true, careful)
		require.NoError(t, err, "careful=%v", careful)
		c := &Tree{s: s}
		got, ok := c.Get("/big")
		require.True(t, ok)
		require.Equal(t, want, got)
		require.Equal(t, tr.Usage(), c.Usage())
		require.Equal(t, img, saveBytes(t, c))
	}
	require.Equal(t, index, tr.Index())
}
