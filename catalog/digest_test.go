package catalog

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"

	"github.com/metatree/metatree/catalog/internal/codec"
)

// referenceDigest computes a tree's digest in format f from its public
// content (nodes read with Get and Children, attributes from their maps),
// independently of the state's records and blobs.
func referenceDigest(t testing.TB, tr *Tree, f DigestFormat) Digest {
	t.Helper()
	var d sum256
	elem := func(b []byte) {
		if f == DigestV1 {
			h := sha256.Sum256(b)
			d.add(&h)
			return
		}
		h := xxh3.Hash128Seed(b, 0x243f6a8885a308d3)
		d.add128(h.Lo, h.Hi, true)
	}
	walkTree(tr, func(n Node) {
		b := []byte{'N'}
		if f == DigestV1 {
			b = codec.AppendStr(b, n.Path)
			b = codec.AppendStr(b, n.Kind)
			b = binary.BigEndian.AppendUint64(b, n.Created)
			b = binary.BigEndian.AppendUint64(b, n.Modified)
		} else {
			b = binary.LittleEndian.AppendUint64(b, n.ID)
			b = binary.LittleEndian.AppendUint64(b, n.Parent)
			b = binary.LittleEndian.AppendUint64(b, n.Created)
			b = binary.LittleEndian.AppendUint64(b, n.Modified)
			b = codec.AppendStr(b, n.Kind)
			b = codec.AppendStr(b, n.Name)
		}
		b = binary.AppendUvarint(b, uint64(len(n.Attrs)))
		keys := make([]string, 0, len(n.Attrs))
		for k := range n.Attrs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = codec.AppendStr(b, k)
			b = appendValue(b, n.Attrs[k])
		}
		elem(b)
		if o, ok := tr.Owned(n.Path); ok {
			owner, _ := tr.Get(o.Path)
			b := binary.BigEndian.AppendUint64([]byte{'O'}, n.ID)
			b = binary.BigEndian.AppendUint64(b, owner.ID)
			if o.Orphan {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
			elem(b)
		}
	})
	tr.mu.RLock()
	for _, x := range tr.s.indexes {
		elem(codec.AppendStr(codec.AppendStr([]byte{'X'}, x.kindName), x.keyName))
	}
	tr.mu.RUnlock()
	return d.bytes(f)
}

// requireDigestConsistent checks tr's incremental digest against a
// recompute from its state and against the reference from its content,
// and the format it does not keep against the reference too; it returns
// the digest in the format tr keeps.
func requireDigestConsistent(t testing.TB, tr *Tree) Digest {
	t.Helper()
	tr.mu.RLock()
	f := tr.s.digestFormat
	kept, full := tr.s.digest, tr.s.computeDigest(f)
	tr.mu.RUnlock()
	require.Equal(t, full, kept, "incremental digest against a recompute (format %d)", f)
	_, d, err := tr.digestOf(f)
	require.NoError(t, err)
	require.Equal(t, referenceDigest(t, tr, f), d, "digest against the reference from the content (format %d)", f)
	for _, g := range []DigestFormat{DigestV1, DigestV2} {
		if g != f {
			_, o, err := tr.digestOf(g)
			require.NoError(t, err)
			require.Equal(t, referenceDigest(t, tr, g), o, "the format not kept (%d) against the reference", g)
		}
	}
	return d
}

// keeping makes tr keep format f, as a check mark of that format does.
func keeping(t testing.TB, tr *Tree, f DigestFormat) *Tree {
	t.Helper()
	require.Len(t, tr.StateDigestOf(int(f)), f.size())
	return tr
}

func loadedCopy(t testing.TB, tr *Tree) *Tree {
	t.Helper()
	c := New()
	require.NoError(t, c.Load(bytes.NewReader(saveBytes(t, tr))))
	return c
}

// digestFormats runs fn once per format, on trees that keep it.
func digestFormats(t *testing.T, fn func(t *testing.T, f DigestFormat)) {
	for _, f := range []DigestFormat{DigestV1, DigestV2} {
		t.Run(fmt.Sprintf("format=%d", f), func(t *testing.T) { fn(t, f) })
	}
}

func TestDigestOfReplayedTreeEqualsImageLoadedTree(t *testing.T) {
	digestFormats(t, func(t *testing.T, f DigestFormat) {
		tr := keeping(t, sampleTree(t), f)
		idx, d, err := tr.digestOf(f)
		require.NoError(t, err)
		require.Equal(t, uint64(9), idx)
		requireDigestConsistent(t, tr)

		loaded := loadedCopy(t, tr)
		lidx, ld, err := loaded.digestOf(f)
		require.NoError(t, err)
		require.Equal(t, idx, lidx)
		require.Equal(t, d, ld)
		keeping(t, loaded, f)

		// Staged and committed, too; and both go on alike.
		staged := New()
		commit, err := staged.Stage(bytes.NewReader(saveBytes(t, tr)))
		require.NoError(t, err)
		commit()
		_, sd, err := staged.digestOf(f)
		require.NoError(t, err)
		require.Equal(t, d, sd)
		keeping(t, staged, f)

		next := encode(t, Op{Type: OpUpdate, Path: "/db1/t1", Set: map[string]Value{"rows": Int(4)}},
			Op{Type: OpMove, Path: "/db1/t1", To: "/t1"})
		for _, x := range []*Tree{tr, loaded, staged} {
			res := x.Apply(10, next).(*Result)
			require.NoError(t, res.Err)
		}
		_, d10, _ := tr.digestOf(f)
		require.NotEqual(t, d, d10)
		for _, x := range []*Tree{loaded, staged} {
			_, xd, _ := x.digestOf(f)
			require.Equal(t, d10, xd)
			requireDigestConsistent(t, x)
		}
	})
}

func TestDigestIgnoresInterningOrderAndFormat1IgnoresIDs(t *testing.T) {
	// The same content reached by different routes: the nodes get other
	// ids, and the attribute keys and kinds are interned in another order.
	a := New()
	mustApply(t, a, 1, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/a", Kind: "k1", Set: map[string]Value{"x": Int(1)}},
		{Type: OpCreate, Path: "/b", Kind: "k2", Set: map[string]Value{"y": Int(2), "x": Int(3)}},
		{Type: OpCreate, Path: "/tmp", Kind: "k3", Set: map[string]Value{"z": Int(2)}},
	}})
	mustApply(t, a, 2, Batch{Ops: []Op{{Type: OpDelete, Path: "/tmp"}}})
	b := New()
	mustApply(t, b, 1, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/b", Kind: "k2", Set: map[string]Value{"x": Int(3), "y": Int(2)}},
		{Type: OpCreate, Path: "/a", Kind: "k1", Set: map[string]Value{"x": Int(1)}},
	}})
	mustApply(t, b, 2, Batch{Ops: []Op{{Type: OpCheck, Path: "/a"}}})
	na, _ := a.Get("/a")
	nb, _ := b.Get("/a")
	require.NotEqual(t, na.ID, nb.ID)
	requireDigestConsistent(t, a)
	requireDigestConsistent(t, b)
	_, a1, _ := a.digestOf(DigestV1)
	_, b1, _ := b.digestOf(DigestV1)
	require.Equal(t, a1, b1, "format 1 holds no node ids")
	_, a2, _ := a.digestOf(DigestV2)
	_, b2, _ := b.digestOf(DigestV2)
	require.NotEqual(t, a2, b2, "format 2 holds the (replicated) node ids")

	// The same ids, the keys and kinds interned in another order (by a
	// batch that failed and rolled back): equal in both formats.
	c := New()
	r := c.Apply(1, encode(t,
		Op{Type: OpCreate, Path: "/q", Kind: "k3", Set: map[string]Value{"z": Int(1), "y": Int(1)}},
		Op{Type: OpCreate, Path: "/q/r", Kind: "k2"},
		Op{Type: OpUpdate, Path: "/missing", Set: map[string]Value{"x": Int(1)}},
	)).(*Result)
	require.ErrorIs(t, r.Err, ErrNotFound)
	r = c.Apply(2, encode(t,
		Op{Type: OpCreate, Path: "/a", Kind: "k1", Set: map[string]Value{"x": Int(1)}},
		Op{Type: OpCreate, Path: "/b", Kind: "k2", Set: map[string]Value{"y": Int(2), "x": Int(3)}},
		Op{Type: OpCreate, Path: "/tmp", Kind: "k3", Set: map[string]Value{"z": Int(2)}},
	)).(*Result)
	require.NoError(t, r.Err)
	mustApply(t, c, 3, Batch{Ops: []Op{{Type: OpDelete, Path: "/tmp"}}})
	// a's nodes were created at 1, c's at 2: give a that history.
	a2nd := New()
	mustApply(t, a2nd, 2, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/a", Kind: "k1", Set: map[string]Value{"x": Int(1)}},
		{Type: OpCreate, Path: "/b", Kind: "k2", Set: map[string]Value{"y": Int(2), "x": Int(3)}},
		{Type: OpCreate, Path: "/tmp", Kind: "k3", Set: map[string]Value{"z": Int(2)}},
	}})
	mustApply(t, a2nd, 3, Batch{Ops: []Op{{Type: OpDelete, Path: "/tmp"}}})
	c.mu.RLock()
	require.Equal(t, "k3", c.s.kinds[1], "c interned its kinds in another order")
	c.mu.RUnlock()
	for _, f := range []DigestFormat{DigestV1, DigestV2} {
		_, x, _ := a2nd.digestOf(f)
		_, y, _ := c.digestOf(f)
		require.Equal(t, x, y, "format %d", f)
	}
}

func TestDigestChangesWithAnySingleChange(t *testing.T) {
	base := func(t *testing.T) *Tree {
		tr := New()
		mustApply(t, tr, 5, Batch{Ops: []Op{
			{Type: OpCreate, Path: "/db", Kind: "database", Set: map[string]Value{"owner": String("ann")}},
			{Type: OpCreate, Path: "/db/t", Kind: "table", Set: map[string]Value{"rows": Int(3), "hot": Bool(true)}},
		}})
		return tr
	}
	ref := base(t)
	cases := []struct {
		name string
		make func(t *testing.T) *Tree
	}{
		{"attribute value", func(t *testing.T) *Tree {
			tr := base(t)
			require.NoError(t, tr.setAttrInPlace("/db/t", "rows", Int(4)))
			return tr
		}},
		{"attribute type", func(t *testing.T) *Tree {
			tr := base(t)
			require.NoError(t, tr.setAttrInPlace("/db/t", "rows", String("3")))
			return tr
		}},
		{"attribute type bytes", func(t *testing.T) *Tree {
			tr := base(t)
			require.NoError(t, tr.setAttrInPlace("/db", "owner", Bytes([]byte("ann"))))
			return tr
		}},
		{"attribute bool value", func(t *testing.T) *Tree {
			tr := base(t)
			require.NoError(t, tr.setAttrInPlace("/db/t", "hot", Bool(false)))
			return tr
		}},
		{"attribute type bool", func(t *testing.T) *Tree {
			tr := base(t)
			require.NoError(t, tr.setAttrInPlace("/db/t", "rows", Bool(true)))
			return tr
		}},
		{"parent", func(t *testing.T) *Tree {
			tr := New()
			mustApply(t, tr, 5, Batch{Ops: []Op{
				{Type: OpCreate, Path: "/db", Kind: "database", Set: map[string]Value{"owner": String("ann")}},
				{Type: OpCreate, Path: "/t", Kind: "table", Set: map[string]Value{"rows": Int(3), "hot": Bool(true)}},
			}})
			return tr
		}},
		{"ownership", func(t *testing.T) *Tree {
			tr := New()
			mustApply(t, tr, 5, Batch{Ops: []Op{
				{Type: OpCreate, Path: "/db", Kind: "database", Set: map[string]Value{"owner": String("ann")}},
				{Type: OpCreate, Path: "/db/t", Kind: "table", Set: map[string]Value{"rows": Int(3), "hot": Bool(true)},
					Owner: Owner{Path: "/db", Version: 5}},
			}})
			return tr
		}},
		{"attribute name", func(t *testing.T) *Tree {
			tr := New()
			mustApply(t, tr, 5, Batch{Ops: []Op{
				{Type: OpCreate, Path: "/db", Kind: "database", Set: map[string]Value{"owner": String("ann")}},
				{Type: OpCreate, Path: "/db/t", Kind: "table", Set: map[string]Value{"rowz": Int(3), "hot": Bool(true)}},
			}})
			return tr
		}},
		{"extra attribute", func(t *testing.T) *Tree {
			tr := base(t)
			require.NoError(t, tr.setAttrInPlace("/db", "extra", Bool(false)))
			return tr
		}},
		{"kind", func(t *testing.T) *Tree {
			tr := New()
			mustApply(t, tr, 5, Batch{Ops: []Op{
				{Type: OpCreate, Path: "/db", Kind: "database", Set: map[string]Value{"owner": String("ann")}},
				{Type: OpCreate, Path: "/db/t", Kind: "view", Set: map[string]Value{"rows": Int(3), "hot": Bool(true)}},
			}})
			return tr
		}},
		{"created index", func(t *testing.T) *Tree {
			tr := New()
			mustApply(t, tr, 4, Batch{Ops: []Op{
				{Type: OpCreate, Path: "/db", Kind: "database", Set: map[string]Value{"owner": String("ann")}},
			}})
			// /db created at 4 and modified at 5, where the base has both 5.
			mustApply(t, tr, 5, Batch{Ops: []Op{
				{Type: OpUpdate, Path: "/db", Set: map[string]Value{"owner": String("ann")}},
				{Type: OpCreate, Path: "/db/t", Kind: "table", Set: map[string]Value{"rows": Int(3), "hot": Bool(true)}},
			}})
			return tr
		}},
		{"modified index", func(t *testing.T) *Tree {
			tr := base(t)
			mustApply(t, tr, 6, Batch{Ops: []Op{{Type: OpUpdate, Path: "/db", Set: map[string]Value{"owner": String("ann")}}}})
			return tr
		}},
		{"path", func(t *testing.T) *Tree {
			tr := New()
			mustApply(t, tr, 5, Batch{Ops: []Op{
				{Type: OpCreate, Path: "/db", Kind: "database", Set: map[string]Value{"owner": String("ann")}},
				{Type: OpCreate, Path: "/db/u", Kind: "table", Set: map[string]Value{"rows": Int(3), "hot": Bool(true)}},
			}})
			return tr
		}},
		{"index definition", func(t *testing.T) *Tree {
			tr := New()
			mustApply(t, tr, 5, Batch{Ops: []Op{
				{Type: OpCreate, Path: "/db", Kind: "database", Set: map[string]Value{"owner": String("ann")}},
				{Type: OpCreate, Path: "/db/t", Kind: "table", Set: map[string]Value{"rows": Int(3), "hot": Bool(true)}},
				{Type: OpCreateIndex, Kind: "table", Attr: "rows"},
			}})
			return tr
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, f := range []DigestFormat{DigestV1, DigestV2} {
				tr := keeping(t, c.make(t), f)
				got := requireDigestConsistent(t, tr)
				_, want, _ := ref.digestOf(f)
				require.NotEqual(t, want, got, "format %d", f)
				// The difference survives an image.
				_, ld, _ := loadedCopy(t, tr).digestOf(f)
				require.Equal(t, got, ld, "format %d", f)
			}
		})
	}
}

// digestRandomRun applies steps random batches (creates, updates, moves,
// subtree deletes, index operations; many fail and roll back) to a tree
// and checks after each that its incremental digest equals a recompute
// and the reference; halfway it loads a copy from an image, which must
// keep the same digest as the original from then on. It returns how many
// batches applied and how many failed.
func digestRandomRun(t *testing.T, f DigestFormat, seed uint64, steps int) (ok, failed int, moved bool) {
	r := rand.New(rand.NewPCG(seed, 35))
	m := newModel()
	a := keeping(t, New(), f)
	var c *Tree
	for i := 1; i <= steps; i++ {
		index := m.index + 1 + uint64(r.IntN(2))
		batch := randBatch(r, m)
		data, err := batch.Encode()
		require.NoError(t, err)
		_, _, merr := m.apply(index, batch)
		res := a.Apply(index, data).(*Result)
		require.Equal(t, merr == nil, res.Err == nil, "batch %+v: model %v, tree %v", batch, merr, res.Err)
		if res.Err != nil {
			failed++
		} else {
			ok++
			for _, o := range batch.Ops {
				moved = moved || o.Type == OpMove
			}
		}
		d := requireDigestConsistent(t, a)
		if c != nil {
			c.Apply(index, data)
			_, cd, _ := c.digestOf(f)
			require.Equal(t, d, cd, "the image-loaded copy at index %d", index)
		}
		if i == steps/2 {
			c = keeping(t, loadedCopy(t, a), f)
		}
	}
	return ok, failed, moved
}

func TestDigestIncrementalEqualsRecomputeAfterRandomBatches(t *testing.T) {
	// Compact the arena often: the digest must not depend on where blobs
	// live.
	defer func(m int64) { compactMin = m }(compactMin)
	compactMin = 0
	var ok, failed int
	var moved bool
	for seed := uint64(1); seed <= 4; seed++ {
		f := DigestV1 + DigestFormat(seed%2)
		o, fl, mv := digestRandomRun(t, f, seed, 400)
		ok, failed, moved = ok+o, failed+fl, moved || mv
	}
	// The generator exercises both outcomes, and moves.
	require.Positive(t, ok)
	require.Positive(t, failed)
	require.True(t, moved)
}

func FuzzDigestIncremental(f *testing.F) {
	f.Add(uint64(1), uint16(60))
	f.Add(uint64(7), uint16(200))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) {
		digestRandomRun(t, DigestV1+DigestFormat(seed%2), seed, int(steps%256))
	})
}

func TestDigestOfFailedBatchIsUnchanged(t *testing.T) {
	digestFormats(t, testDigestOfFailedBatchIsUnchanged)
}

func testDigestOfFailedBatchIsUnchanged(t *testing.T, f DigestFormat) {
	tr := keeping(t, sampleTree(t), f)
	_, before, _ := tr.digestOf(f)
	// Creates, an update, a move and a subtree delete, then a failing op.
	data := encode(t,
		Op{Type: OpCreate, Path: "/x", Kind: "dir", Set: map[string]Value{"a": Int(1)}},
		Op{Type: OpUpdate, Path: "/db1/t1", Set: map[string]Value{"rows": Int(9)}},
		Op{Type: OpMove, Path: "/db1/t1", To: "/x/t1"},
		Op{Type: OpDelete, Path: "/db1", Recursive: true},
		Op{Type: OpCreateIndex, Kind: "dir", Attr: "a"},
		Op{Type: OpUpdate, Path: "/missing", Set: map[string]Value{"a": Int(1)}},
	)
	res := tr.Apply(10, data).(*Result)
	require.ErrorIs(t, res.Err, ErrNotFound)
	idx, after, _ := tr.digestOf(f)
	require.Equal(t, uint64(10), idx)
	require.Equal(t, before, after)
	requireDigestConsistent(t, tr)
}

func TestParseDigestRoundTripsEachFormatAndRejectsBadInput(t *testing.T) {
	for _, f := range []DigestFormat{DigestV1, DigestV2} {
		_, d, err := sampleTree(t).digestOf(f)
		require.NoError(t, err)
		require.Equal(t, f, d.Format())
		require.Len(t, d.Bytes(), f.size())
		got, err := ParseDigest(d.String())
		require.NoError(t, err)
		require.Equal(t, d, got)
		for _, bad := range []string{"", "00", d.String()[1:], "zz" + d.String()[2:], d.String() + "00"} {
			_, err := ParseDigest(bad)
			require.ErrorIs(t, err, ErrInvalid, "%q", bad)
		}
	}
}

func TestSetAttrInPlaceRejectsBadInput(t *testing.T) {
	tr := sampleTree(t)
	require.ErrorIs(t, tr.setAttrInPlace("/nope", "a", Int(1)), ErrNotFound)
	require.ErrorIs(t, tr.setAttrInPlace("bad", "a", Int(1)), ErrInvalidName)
	require.ErrorIs(t, tr.setAttrInPlace("/db1", "a/b", Int(1)), ErrInvalidName)
	require.ErrorIs(t, tr.setAttrInPlace("/db1", "a", Value{}), ErrInvalid)
	idx, _ := tr.Digest()
	require.NoError(t, tr.setAttrInPlace("/db1", "owner", String("bob")))
	n, _ := tr.Get("/db1")
	require.Equal(t, String("bob"), n.Attrs["owner"])
	idx2, _ := tr.Digest()
	require.Equal(t, idx, idx2)
	requireDigestConsistent(t, tr)
}

func TestDigestOfAnUnknownFormatIsInvalid(t *testing.T) {
	tr := sampleTree(t)
	for _, f := range []DigestFormat{0, NewestDigest + 1} {
		_, _, err := tr.digestOf(f)
		require.ErrorIs(t, err, ErrInvalid, "format %d", f)
	}
	for _, f := range []int{-1, 0, int(NewestDigest) + 1, 256 + int(DigestV1)} {
		require.Nil(t, tr.StateDigestOf(f), "format %d", f)
	}
	requireDigestConsistent(t, tr)
}

func TestStateDigestOfSwitchesTheKeptFormatAndKeepsItCurrent(t *testing.T) {
	tr := sampleTree(t)
	tr.mu.RLock()
	require.Equal(t, NewestDigest, tr.s.digestFormat, "a tree starts keeping the newest format")
	tr.mu.RUnlock()
	idx := uint64(10)
	for _, f := range []DigestFormat{DigestV1, DigestV2, DigestV1} {
		_, want, err := tr.digestOf(f)
		require.NoError(t, err)
		require.Equal(t, want.Bytes(), tr.StateDigestOf(int(f)))
		tr.mu.RLock()
		require.Equal(t, f, tr.s.digestFormat)
		tr.mu.RUnlock()
		mustApply(t, tr, idx, Batch{Ops: []Op{
			{Type: OpUpdate, Path: "/db1", Set: map[string]Value{"n": Int(int64(idx))}},
			{Type: OpCreate, Path: fmt.Sprintf("/db1/x%d", idx), Kind: "dir"},
		}})
		idx++
		require.Equal(t, f, requireDigestConsistent(t, tr).Format())
	}
	require.Equal(t, tr.StateDigestOf(int(DigestV1)), tr.StateDigest(), "StateDigest is format 1's")
}

func TestDigestTellsOwnedOrphanedAndFreeNodesApart(t *testing.T) {
	build := func(o Owner) *Tree {
		tr := New()
		mustApply(t, tr, 5, Batch{Ops: []Op{
			{Type: OpCreate, Path: "/m", Kind: "member"},
			{Type: OpCreate, Path: "/j", Kind: "job", Owner: o},
		}})
		return tr
	}
	trees := []*Tree{build(Owner{}), build(Owner{Path: "/m", Version: 5}), build(Owner{Path: "/m", Version: 5, Orphan: true})}
	for _, f := range []DigestFormat{DigestV1, DigestV2} {
		seen := map[Digest]int{}
		for i, tr := range trees {
			d := requireDigestConsistent(t, keeping(t, tr, f))
			_, dup := seen[d]
			require.False(t, dup, "format %d: tree %d digests like tree %d", f, i, seen[d])
			seen[d] = i
		}
	}
}

// A move gives the digest of a tree whose nodes were made in the places
// they were moved to, with the same ids and indexes: in format 2 the
// moved node's element is all that changes, its subtree's stay.
func TestDigestAfterMoveEqualsTheTreeBuiltInPlace(t *testing.T) {
	digestFormats(t, func(t *testing.T, f DigestFormat) {
		moved := keeping(t, New(), f)
		mustApply(t, moved, 5, Batch{Ops: []Op{
			{Type: OpCreate, Path: "/a", Kind: "dir"},
			{Type: OpCreate, Path: "/b", Kind: "dir"},
			{Type: OpCreate, Path: "/a/x", Kind: "table", Set: map[string]Value{"rows": Int(1)}},
			{Type: OpCreate, Path: "/a/x/c", Kind: "replica", Set: map[string]Value{"worker": Int(2)}},
		}})
		elem := func(path string) (lo, hi uint64) {
			moved.mu.RLock()
			defer moved.mu.RUnlock()
			slot, ok := moved.s.Resolve(path)
			require.True(t, ok, path)
			var g digester
			return g.nodeHash2(moved.s, slot)
		}
		moved.mu.RLock()
		before := moved.s.digest
		moved.mu.RUnlock()
		oldLo, oldHi := elem("/a/x")
		mustApply(t, moved, 6, Batch{Ops: []Op{{Type: OpMove, Path: "/a/x", To: "/b/y"}}})
		if f == DigestV2 {
			// The sum changed by the moved node's element alone: its
			// child's element stays.
			newLo, newHi := elem("/b/y")
			moved.mu.RLock()
			after := moved.s.digest
			moved.mu.RUnlock()
			after.add128(newLo, newHi, false)
			after.add128(oldLo, oldHi, true)
			require.Equal(t, before, after)
		}
		inPlace := keeping(t, New(), f)
		mustApply(t, inPlace, 5, Batch{Ops: []Op{
			{Type: OpCreate, Path: "/a", Kind: "dir"},
			{Type: OpCreate, Path: "/b", Kind: "dir"},
			{Type: OpCreate, Path: "/b/y", Kind: "table", Set: map[string]Value{"rows": Int(1)}},
			{Type: OpCreate, Path: "/b/y/c", Kind: "replica", Set: map[string]Value{"worker": Int(2)}},
		}})
		mustApply(t, inPlace, 6, Batch{Ops: []Op{{Type: OpUpdate, Path: "/b/y", Set: map[string]Value{"rows": Int(1)}}}})
		require.Equal(t, dump(inPlace), dump(moved))
		require.Equal(t, requireDigestConsistent(t, inPlace), requireDigestConsistent(t, moved))
	})
}

// edgeAttrs returns attributes whose encodings take every length form the
// format has: values of each type, strings and keys whose lengths need a
// two-byte varint, integers at the zigzag boundaries and the extremes.
func edgeAttrs() map[string]Value {
	return map[string]Value{
		"s":                      String(strings.Repeat("é", 100)),
		"b":                      Bytes(bytes.Repeat([]byte{0, 0xff}, 70)),
		"e":                      String(""),
		"i63":                    Int(63),
		"i64":                    Int(64),
		"neg":                    Int(-64),
		"min":                    Int(math.MinInt64),
		"max":                    Int(math.MaxInt64),
		"t":                      Bool(true),
		"f":                      Bool(false),
		strings.Repeat("k", 200): Int(1),
		strings.Repeat("ü", 100): String("x"),
	}
}

// Creates take their format 2 element from the entry (digester.created)
// and updates build theirs in their merge (digester.updating), where a
// recompute and a loaded image compute every element from the node as it
// is kept: the ways must agree for any attributes, or replicas that replay
// and replicas that load an image would disagree.
func TestDigestOfCreatesAndUpdatesEqualsTheRecomputeForEveryEncodingForm(t *testing.T) {
	many := map[string]Value{}
	for i := range 200 { // a count that takes two varint bytes
		many[fmt.Sprintf("a%03d", i)] = Int(int64(i) - 100)
	}
	long := strings.Repeat("n", MaxNameLen)
	ops := []Op{
		{Type: OpCreate, Path: "/bare", Kind: "dir"},
		{Type: OpCreate, Path: "/" + long, Kind: strings.Repeat("K", MaxNameLen), Set: edgeAttrs()},
		{Type: OpCreate, Path: "/" + long + "/many", Kind: "k", Set: many},
		{Type: OpCreate, Path: "/bare/ü", Kind: "ü", Set: map[string]Value{"v": String(strings.Repeat("v", 1000))}},
	}
	// Updates replace, add and unset attributes of each form; the update
	// builds the elements before and after itself (digester.updating).
	long2 := map[string]Value{}
	for k := range edgeAttrs() {
		long2[k] = String(strings.Repeat("w", 130))
	}
	updates := []Op{
		{Type: OpUpdate, Path: "/bare", Set: edgeAttrs()},
		{Type: OpUpdate, Path: "/" + long, Set: map[string]Value{"s": Int(-1), "zz": Bool(true), "a": Bytes(nil)},
			Unset: []string{"b", "max", strings.Repeat("k", 200)}},
		{Type: OpUpdate, Path: "/" + long + "/many", Set: long2, Unset: []string{"a000", "a100", "a199"}},
		{Type: OpUpdate, Path: "/bare/ü", Unset: []string{"v"}},
		{Type: OpUpdate, Path: "/", Set: map[string]Value{"root": Int(1)}},
	}
	digestFormats(t, func(t *testing.T, f DigestFormat) {
		tr := keeping(t, New(), f)
		mustApply(t, tr, 1, Batch{Ops: ops[:1]})
		mustApply(t, tr, 1<<40, Batch{Ops: ops[1:]})
		d := requireDigestConsistent(t, tr)
		_, ld, _ := loadedCopy(t, tr).digestOf(f)
		require.Equal(t, d, ld)
		for i, u := range updates {
			mustApply(t, tr, 1<<40+1+uint64(i), Batch{Ops: []Op{u}})
			d := requireDigestConsistent(t, tr)
			_, ld, _ := loadedCopy(t, tr).digestOf(f)
			require.Equal(t, d, ld, "after update %d", i)
		}
	})
}

// A create builds its format 2 element in the digester's array when it
// fits, with one-byte kind and name lengths (digester.created), and through
// elemHead otherwise: on both sides of each of those edges the kept digest
// equals the recompute from the blobs and the reference from the content.
func TestDigestOfCreatesAtTheEdgesOfTheInPlaceElement(t *testing.T) {
	var g digester
	var ops []Op
	sizes := map[int]bool{}
	for _, kl := range []int{1, 0x7f, 0x80} {
		for _, nl := range []int{1, 0x7f, 0x80} {
			for _, want := range []int{len(g.el) - 1, len(g.el), len(g.el) + 1} {
				// One attribute "v" of vl bytes: its encoding is the
				// count, the key, the type, vl's uvarint and the bytes.
				rest := want - (35 + kl + nl) - 4
				vl := max(rest-1, 0)
				if vl >= 0x80 {
					vl = rest - 2
				}
				dir := fmt.Sprintf("/d%d", len(ops))
				create := Op{Type: OpCreate, Path: dir + "/" + strings.Repeat("n", nl), Kind: strings.Repeat("k", kl),
					Set: map[string]Value{"v": String(strings.Repeat("v", vl))}}
				enc := binary.AppendUvarint(codec.AppendStr([]byte{1}, "v"), uint64(vl))
				sizes[35+kl+nl+len(enc)+1+vl] = true
				ops = append(ops, Op{Type: OpCreate, Path: dir, Kind: "dir"}, create)
			}
		}
	}
	for _, n := range []int{len(g.el) - 1, len(g.el), len(g.el) + 1} {
		require.True(t, sizes[n], "no element of %d bytes among %v", n, sizes)
	}
	tr := keeping(t, New(), DigestV2)
	mustApply(t, tr, 1, Batch{Ops: ops})
	requireDigestConsistent(t, tr)
}

// The set encoding a decoded create carries is the attributes' canonical
// encoding, the one a format 2 element holds; other ops carry none.
func TestDecodedCreateCarriesItsAttributesEncoding(t *testing.T) {
	attrs := edgeAttrs()
	data := encode(t,
		Op{Type: OpCreate, Path: "/a", Kind: "k", Set: attrs},
		Op{Type: OpCreate, Path: "/b", Kind: "k"},
		Op{Type: OpUpdate, Path: "/a", Set: attrs},
	)
	var d decoder
	ops, err := d.decode(data, nil, true)
	require.NoError(t, err)
	keys := slices.Sorted(maps.Keys(attrs))
	want := binary.AppendUvarint(nil, uint64(len(keys)))
	for _, k := range keys {
		want = appendValue(codec.AppendStr(want, k), attrs[k])
	}
	require.Equal(t, want, ops[0].setEnc)
	require.Equal(t, []byte{0}, ops[1].setEnc)
	require.Nil(t, ops[2].setEnc)
}
