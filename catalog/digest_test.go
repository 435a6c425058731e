package catalog

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// referenceDigest computes a tree's digest from its public content (nodes
// read with Get and Children, attributes from their maps), independently
// of the state's records and blobs.
func referenceDigest(t testing.TB, tr *Tree) Digest {
	t.Helper()
	var d sum256
	walkTree(tr, func(n Node) {
		b := []byte{'N'}
		b = appendStr(b, n.Path)
		b = appendStr(b, n.Kind)
		b = binary.BigEndian.AppendUint64(b, n.Created)
		b = binary.BigEndian.AppendUint64(b, n.Modified)
		b = binary.AppendUvarint(b, uint64(len(n.Attrs)))
		keys := make([]string, 0, len(n.Attrs))
		for k := range n.Attrs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = appendStr(b, k)
			b = appendValue(b, n.Attrs[k])
		}
		h := sha256.Sum256(b)
		d.add(&h)
		if o, ok := tr.Owned(n.Path); ok {
			owner, _ := tr.Get(o.Path)
			b := binary.BigEndian.AppendUint64([]byte{'O'}, n.ID)
			b = binary.BigEndian.AppendUint64(b, owner.ID)
			if o.Orphan {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
			h := sha256.Sum256(b)
			d.add(&h)
		}
	})
	tr.mu.RLock()
	for _, x := range tr.s.indexes {
		h := sha256.Sum256(appendStr(appendStr([]byte{'X'}, x.kindName), x.keyName))
		d.add(&h)
	}
	tr.mu.RUnlock()
	return d.bytes()
}

// requireDigestConsistent checks tr's incremental digest against a
// recompute from its state and against the reference from its content.
func requireDigestConsistent(t testing.TB, tr *Tree) Digest {
	t.Helper()
	_, d := tr.Digest()
	tr.mu.RLock()
	full := tr.s.computeDigest()
	tr.mu.RUnlock()
	require.Equal(t, full.bytes(), d, "incremental digest against a recompute")
	require.Equal(t, referenceDigest(t, tr), d, "digest against the reference from the content")
	return d
}

func loadedCopy(t testing.TB, tr *Tree) *Tree {
	t.Helper()
	c := New()
	require.NoError(t, c.Load(bytes.NewReader(saveBytes(t, tr))))
	return c
}

func TestDigestOfReplayedTreeEqualsImageLoadedTree(t *testing.T) {
	tr := sampleTree(t)
	idx, d := tr.Digest()
	require.Equal(t, uint64(9), idx)
	requireDigestConsistent(t, tr)

	loaded := loadedCopy(t, tr)
	lidx, ld := loaded.Digest()
	require.Equal(t, idx, lidx)
	require.Equal(t, d, ld)

	// Staged and committed, too; and both go on alike.
	staged := New()
	commit, err := staged.Stage(bytes.NewReader(saveBytes(t, tr)))
	require.NoError(t, err)
	commit()
	_, sd := staged.Digest()
	require.Equal(t, d, sd)

	next := encode(t, Op{Type: OpUpdate, Path: "/db1/t1", Set: map[string]Value{"rows": Int(4)}},
		Op{Type: OpMove, Path: "/db1/t1", To: "/t1"})
	for _, x := range []*Tree{tr, loaded, staged} {
		res := x.Apply(10, next).(*Result)
		require.NoError(t, res.Err)
	}
	_, d10 := tr.Digest()
	require.NotEqual(t, d, d10)
	for _, x := range []*Tree{loaded, staged} {
		_, xd := x.Digest()
		require.Equal(t, d10, xd)
		requireDigestConsistent(t, x)
	}
}

func TestDigestIgnoresIDsAndInterningOrder(t *testing.T) {
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
	require.Equal(t, requireDigestConsistent(t, a), requireDigestConsistent(t, b))
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
	_, want := ref.Digest()
	cases := []struct {
		name string
		make func(t *testing.T) *Tree
	}{
		{"attribute value", func(t *testing.T) *Tree {
			tr := base(t)
			require.NoError(t, tr.SetAttrForTesting("/db/t", "rows", Int(4)))
			return tr
		}},
		{"attribute type", func(t *testing.T) *Tree {
			tr := base(t)
			require.NoError(t, tr.SetAttrForTesting("/db/t", "rows", String("3")))
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
			require.NoError(t, tr.SetAttrForTesting("/db", "extra", Bool(false)))
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
			tr := c.make(t)
			got := requireDigestConsistent(t, tr)
			require.NotEqual(t, want, got)
			// The difference survives an image.
			_, ld := loadedCopy(t, tr).Digest()
			require.Equal(t, got, ld)
		})
	}
}

// digestRandomRun applies steps random batches (creates, updates, moves,
// subtree deletes, index operations; many fail and roll back) to a tree
// and checks after each that its incremental digest equals a recompute
// and the reference; halfway it loads a copy from an image, which must
// keep the same digest as the original from then on. It returns how many
// batches applied and how many failed.
func digestRandomRun(t *testing.T, seed uint64, steps int) (ok, failed int, moved bool) {
	r := rand.New(rand.NewPCG(seed, 35))
	m := newModel()
	a := New()
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
			_, cd := c.Digest()
			require.Equal(t, d, cd, "the image-loaded copy at index %d", index)
		}
		if i == steps/2 {
			c = loadedCopy(t, a)
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
		o, f, mv := digestRandomRun(t, seed, 400)
		ok, failed, moved = ok+o, failed+f, moved || mv
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
		digestRandomRun(t, seed, int(steps%256))
	})
}

func TestDigestOfFailedBatchIsUnchanged(t *testing.T) {
	tr := sampleTree(t)
	_, before := tr.Digest()
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
	idx, after := tr.Digest()
	require.Equal(t, uint64(10), idx)
	require.Equal(t, before, after)
	requireDigestConsistent(t, tr)
}

func TestParseDigestRoundTripsAndRejectsBadInput(t *testing.T) {
	_, d := sampleTree(t).Digest()
	got, err := ParseDigest(d.String())
	require.NoError(t, err)
	require.Equal(t, d, got)
	for _, bad := range []string{"", "00", d.String()[1:], "zz" + d.String()[2:]} {
		_, err := ParseDigest(bad)
		require.ErrorIs(t, err, ErrInvalid, "%q", bad)
	}
}

func TestSetAttrForTestingRejectsBadInput(t *testing.T) {
	tr := sampleTree(t)
	require.ErrorIs(t, tr.SetAttrForTesting("/nope", "a", Int(1)), ErrNotFound)
	require.ErrorIs(t, tr.SetAttrForTesting("bad", "a", Int(1)), ErrInvalidName)
	require.ErrorIs(t, tr.SetAttrForTesting("/db1", "a/b", Int(1)), ErrInvalidName)
	require.ErrorIs(t, tr.SetAttrForTesting("/db1", "a", Value{}), ErrInvalid)
	idx, _ := tr.Digest()
	require.NoError(t, tr.SetAttrForTesting("/db1", "owner", String("bob")))
	n, _ := tr.Get("/db1")
	require.Equal(t, String("bob"), n.Attrs["owner"])
	idx2, _ := tr.Digest()
	require.Equal(t, idx, idx2)
	requireDigestConsistent(t, tr)
}
