package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

// model is a deliberately naive reference implementation of the batch
// semantics (a map from path to node), used to check Tree op by op.
type model struct {
	index   uint64
	nextID  uint64
	nodes   map[string]*mnode
	indexes map[[2]string]bool
}

type mnode struct {
	id                uint64
	kind              string
	attrs             map[string]Value
	created, modified uint64
}

func newModel() *model {
	return &model{nextID: 2, nodes: map[string]*mnode{"/": {id: 1}}, indexes: map[[2]string]bool{}}
}

func (m *model) clone() *model {
	c := &model{index: m.index, nextID: m.nextID, nodes: map[string]*mnode{}, indexes: maps.Clone(m.indexes)}
	for p, n := range m.nodes {
		nn := *n
		nn.attrs = maps.Clone(n.attrs)
		c.nodes[p] = &nn
	}
	return c
}

func parentOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i == 0 {
		return "/"
	}
	return p[:i]
}

func (m *model) hasKids(p string) bool {
	for q := range m.nodes {
		if q != "/" && q != p && under(q, p) {
			return true
		}
	}
	return false
}

// apply returns the ids and the failing op (or -1) with its sentinel.
func (m *model) apply(index uint64, b Batch) ([]uint64, int, error) {
	if index <= m.index {
		return nil, -1, ErrApplied
	}
	work := m.clone()
	ids := make([]uint64, len(b.Ops))
	for i, o := range b.Ops {
		id, err := work.op(index, o)
		if err != nil {
			m.index = index
			return nil, i, err
		}
		ids[i] = id
	}
	work.index = index
	*m = *work
	return ids, -1, nil
}

func (m *model) op(index uint64, o Op) (uint64, error) {
	switch o.Type {
	case OpCreateIndex:
		k := [2]string{o.Kind, o.Attr}
		if m.indexes[k] {
			return 0, ErrExists
		}
		m.indexes[k] = true
		return 0, nil
	case OpDropIndex:
		k := [2]string{o.Kind, o.Attr}
		if !m.indexes[k] {
			return 0, ErrNotFound
		}
		delete(m.indexes, k)
		return 0, nil
	}
	n := m.nodes[o.Path]
	c := o.Cond
	if o.Type == OpCheck && c.zero() {
		c.Exists = true
	}
	switch {
	case c.Absent && n != nil, c.Exists && n == nil, c.Modified != 0 && n == nil, c.Modified != 0 && n.modified != c.Modified:
		return 0, ErrConflict
	}
	switch o.Type {
	case OpCheck:
		if n == nil {
			return 0, nil
		}
		return n.id, nil
	case OpCreate:
		if n != nil {
			return 0, ErrExists
		}
		if m.nodes[parentOf(o.Path)] == nil {
			return 0, ErrNotFound
		}
		id := m.nextID
		m.nextID++
		attrs := maps.Clone(o.Set)
		if len(attrs) == 0 {
			attrs = nil
		}
		m.nodes[o.Path] = &mnode{id: id, kind: o.Kind, attrs: attrs, created: index, modified: index}
		return id, nil
	}
	if n == nil {
		return 0, ErrNotFound
	}
	switch o.Type {
	case OpUpdate:
		if o.Kind != "" && o.Kind != n.kind {
			return 0, ErrConflict
		}
		if n.attrs == nil {
			n.attrs = map[string]Value{}
		}
		maps.Copy(n.attrs, o.Set)
		for _, k := range o.Unset {
			delete(n.attrs, k)
		}
		if len(n.attrs) == 0 {
			n.attrs = nil
		}
		n.modified = index
	case OpDelete:
		if m.hasKids(o.Path) && !o.Recursive {
			return 0, ErrNotEmpty
		}
		for q := range m.nodes {
			if under(q, o.Path) {
				delete(m.nodes, q)
			}
		}
	case OpMove:
		if m.nodes[parentOf(o.To)] == nil {
			return 0, ErrNotFound
		}
		if m.nodes[o.To] != nil {
			return 0, ErrExists
		}
		moved := map[string]*mnode{}
		for q, x := range m.nodes {
			if under(q, o.Path) {
				moved[o.To+q[len(o.Path):]] = x
				delete(m.nodes, q)
			}
		}
		maps.Copy(m.nodes, moved)
		n.modified = index
	}
	return n.id, nil
}

// check compares every observable of tr with the model, including indexes
// against a brute-force scan.
func (m *model) check(t *testing.T, tr *Tree) {
	t.Helper()
	if tr.Index() != m.index {
		t.Fatalf("Index() = %d, model %d", tr.Index(), m.index)
	}
	if tr.Len() != len(m.nodes) {
		t.Fatalf("Len() = %d, model %d", tr.Len(), len(m.nodes))
	}
	kids := map[string][]string{}
	byKind := map[string][]uint64{}
	for p, n := range m.nodes {
		got, ok := tr.Get(p)
		if !ok {
			t.Fatalf("Get(%q): missing", p)
		}
		var parentID uint64
		name := ""
		if p != "/" {
			parentID = m.nodes[parentOf(p)].id
			name = p[strings.LastIndexByte(p, '/')+1:]
			kids[parentOf(p)] = append(kids[parentOf(p)], name)
			byKind[n.kind] = append(byKind[n.kind], n.id)
		}
		want := Node{ID: n.id, Parent: parentID, Name: name, Path: p, Kind: n.kind, Attrs: n.attrs, Created: n.created, Modified: n.modified}
		if !nodeEqual(got, want) {
			t.Fatalf("Get(%q) = %+v, model %+v", p, got, want)
		}
		byID, ok := tr.GetID(n.id)
		if !ok || !nodeEqual(byID, want) {
			t.Fatalf("GetID(%d) = %+v, %v; model %+v", n.id, byID, ok, want)
		}
	}
	for p := range m.nodes {
		want := kids[p]
		sort.Strings(want)
		if got := tr.Children(p); !slices.Equal(got, want) {
			t.Fatalf("Children(%q) = %q, model %q", p, got, want)
		}
	}
	for _, kind := range []string{"k1", "k2", "k3"} {
		want := byKind[kind]
		slices.Sort(want)
		var got []uint64
		for _, n := range tr.OfKind(kind) {
			got = append(got, n.ID)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("OfKind(%q) = %v, model %v", kind, got, want)
		}
		for _, attr := range []string{"x", "y"} {
			if tr.HasIndex(kind, attr) != m.indexes[[2]string{kind, attr}] {
				t.Fatalf("HasIndex(%q, %q) = %v", kind, attr, !m.indexes[[2]string{kind, attr}])
			}
			for _, v := range testValues {
				var want []uint64
				for _, n := range m.nodes {
					if n.kind == kind && n.attrs[attr] == v {
						want = append(want, n.id)
					}
				}
				slices.Sort(want)
				var got []uint64
				for _, n := range tr.Find(kind, attr, v) {
					got = append(got, n.ID)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("Find(%q, %q, %v) = %v, brute force %v", kind, attr, v, got, want)
				}
			}
		}
	}
}

func nodeEqual(a, b Node) bool {
	if len(a.Attrs) != len(b.Attrs) {
		return false
	}
	for k, v := range a.Attrs {
		if w, ok := b.Attrs[k]; !ok || !v.Equal(w) {
			return false
		}
	}
	return a.ID == b.ID && a.Parent == b.Parent && a.Name == b.Name && a.Path == b.Path &&
		a.Kind == b.Kind && a.Created == b.Created && a.Modified == b.Modified
}

var testValues = []Value{Int(0), Int(1), Int(-7), String(""), String("v"), Bool(true), Bool(false), Bytes([]byte{0, 1})}

var testNames = []string{"a", "b", "c", "d", "e", "f"}

// existing picks a path of the model (deterministically for a seed), or
// a random one now and then.
func existing(r *rand.Rand, m *model) string {
	if r.IntN(8) == 0 {
		return randPath(r)
	}
	paths := slices.Sorted(maps.Keys(m.nodes))
	return paths[r.IntN(len(paths))]
}

func child(r *rand.Rand, parent string) string {
	name := testNames[r.IntN(len(testNames))]
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}

func randPath(r *rand.Rand) string {
	depth := 1 + r.IntN(3)
	var sb strings.Builder
	for i := 0; i < depth; i++ {
		sb.WriteByte('/')
		sb.WriteString(testNames[r.IntN(len(testNames))])
	}
	return sb.String()
}

// randBatch returns a random batch that encodes (the ops may still fail
// against the tree). m is used to pick realistic Modified conditions.
func randBatch(r *rand.Rand, m *model) Batch {
	n := 1 + r.IntN(4)
	var b Batch
	for len(b.Ops) < n {
		var o Op
		o.Path = existing(r, m)
		switch x := r.IntN(20); {
		case x < 8:
			o.Type = OpCreate
			o.Path = child(r, existing(r, m))
			o.Kind = fmt.Sprintf("k%d", 1+r.IntN(3))
			o.Set = randAttrs(r)
		case x < 12:
			o.Type = OpUpdate
			o.Set = randAttrs(r)
			if r.IntN(2) == 0 {
				o.Unset = []string{[]string{"x", "y", "z"}[r.IntN(3)]}
				delete(o.Set, o.Unset[0])
			}
			if r.IntN(8) == 0 {
				o.Kind = fmt.Sprintf("k%d", 1+r.IntN(3))
			}
		case x < 14:
			o.Type = OpDelete
			o.Recursive = r.IntN(3) == 0
		case x < 16:
			o.Type = OpMove
			o.To = child(r, existing(r, m))
		case x < 18:
			o.Type = OpCheck
		case x < 19:
			o.Type = OpCreateIndex
			o.Path = ""
			o.Kind = fmt.Sprintf("k%d", 1+r.IntN(3))
			o.Attr = []string{"x", "y"}[r.IntN(2)]
		default:
			o.Type = OpDropIndex
			o.Path = ""
			o.Kind = fmt.Sprintf("k%d", 1+r.IntN(3))
			o.Attr = []string{"x", "y"}[r.IntN(2)]
		}
		if o.Path != "" {
			switch r.IntN(16) {
			case 0:
				o.Cond.Exists = true
			case 1:
				o.Cond.Absent = true
			case 2:
				if mn := m.nodes[o.Path]; mn != nil && r.IntN(3) > 0 {
					o.Cond.Modified = mn.modified
				} else {
					o.Cond.Modified = 1 + r.Uint64N(m.index+1)
				}
			}
		}
		if _, err := (Batch{Ops: []Op{o}}).Encode(); err != nil {
			continue // e.g. a move into its own subtree
		}
		b.Ops = append(b.Ops, o)
	}
	return b
}

func randAttrs(r *rand.Rand) map[string]Value {
	n := r.IntN(3)
	if n == 0 {
		return nil
	}
	m := map[string]Value{}
	for i := 0; i < n; i++ {
		m[[]string{"x", "y", "z"}[r.IntN(3)]] = testValues[r.IntN(len(testValues))]
	}
	return m
}

func applyChecked(t *testing.T, tr *Tree, m *model, index uint64, b Batch, data []byte) {
	t.Helper()
	res := tr.Apply(index, data).(*Result)
	ids, failed, merr := m.apply(index, b)
	if res.Index != index {
		t.Fatalf("Result.Index = %d, want %d", res.Index, index)
	}
	if merr == nil {
		if res.Err != nil {
			t.Fatalf("index %d: Apply failed (%v), model succeeded\nbatch %+v", index, res.Err, b)
		}
		if !slices.Equal(res.IDs, ids) {
			t.Fatalf("index %d: IDs %v, model %v", index, res.IDs, ids)
		}
		return
	}
	var oe *OpError
	if !errors.As(res.Err, &oe) || oe.Op != failed || !errors.Is(res.Err, merr) {
		t.Fatalf("index %d: Apply error %v, model: op %d %v\nbatch %+v", index, res.Err, failed, merr, b)
	}
	if res.IDs != nil {
		t.Fatalf("failed batch returned IDs %v", res.IDs)
	}
}

// TestRandomAgainstModel applies long random batch sequences (many of which
// fail) to a tree and to the reference model, to a second tree, and to a
// tree saved and loaded halfway; all must agree, and their saves must be
// byte-identical. It runs with path index hashes that collide too: the
// applier finds the nodes it changes through the index.
func TestRandomAgainstModel(t *testing.T) {
	// Compact the arena whenever garbage outweighs live data, so that
	// compaction happens many times in a run.
	defer func(m int64) { compactMin = m }(compactMin)
	compactMin = 0
	eachHashMask(t, hashMasks, func(t *testing.T, mask uint64) {
		seeds := uint64(6)
		if mask != ^uint64(0) {
			seeds = 2
		}
		for seed := uint64(1); seed <= seeds; seed++ {
			randomAgainstModel(t, seed)
		}
	})
}

// randomAgainstModel is TestRandomAgainstModel's run of one seed.
func randomAgainstModel(t *testing.T, seed uint64) {
	t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
		r := rand.New(rand.NewPCG(seed, 99))
		m := newModel()
		a, b := New(), New()
		var c *Tree
		const steps = 1500
		failed := 0
		for i := 1; i <= steps; i++ {
			index := uint64(i) * (1 + uint64(r.IntN(2))) // gaps, as raft has
			index = max(index, m.index+1)
			batch := randBatch(r, m)
			data, err := batch.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			applyChecked(t, a, m, index, batch, data)
			if res := b.Apply(index, data).(*Result); res.Err != nil {
				failed++
			}
			if c != nil {
				c.Apply(index, data)
			}
			if i == steps/2 {
				var img bytes.Buffer
				if err := b.Save(&img); err != nil {
					t.Fatal(err)
				}
				c = New()
				if err := c.Load(&img); err != nil {
					t.Fatalf("Load: %v", err)
				}
				m.check(t, c)
			}
			if i%100 == 0 {
				m.check(t, a)
				requireSizeIsSum(t, a)
			}
		}
		m.check(t, a)
		m.check(t, b)
		m.check(t, c)
		if failed == 0 || failed == steps {
			t.Fatalf("%d of %d batches failed: the generator does not exercise both paths", failed, steps)
		}
		requireSizeIsSum(t, c)
		if a.Usage() != b.Usage() || a.Usage() != c.Usage() {
			t.Fatalf("usage differs: %+v, %+v, %+v (loaded at step %d)", a.Usage(), b.Usage(), c.Usage(), steps/2)
		}
		sa, sb, sc := saveBytes(t, a), saveBytes(t, b), saveBytes(t, c)
		if !bytes.Equal(sa, sb) || !bytes.Equal(sa, sc) {
			t.Fatalf("saves differ: %d, %d, %d bytes", len(sa), len(sb), len(sc))
		}
		t.Logf("%d nodes, %d of %d batches failed, image %d bytes", len(m.nodes), failed, steps, len(sa))
	})
}

func saveBytes(t testing.TB, tr *Tree) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := tr.Save(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestCompactionHappens checks that the arena does get compacted (and stays
// correct) when updates turn most of it into garbage.
func TestCompactionHappens(t *testing.T) {
	defer func(m int64) { compactMin = m }(compactMin)
	compactMin = 0
	m := newModel()
	tr := New()
	index := uint64(0)
	apply := func(ops ...Op) {
		index++
		b := Batch{Ops: ops}
		applyChecked(t, tr, m, index, b, encode(t, ops...))
	}
	apply(Op{Type: OpCreateIndex, Kind: "k1", Attr: "x"}, Op{Type: OpCreate, Path: "/a", Kind: "k1"})
	compactions := 0
	chunks := 0
	for i := 0; i < 300; i++ {
		apply(Op{Type: OpUpdate, Path: "/a", Set: map[string]Value{"x": Int(int64(i % 5)), "y": String(strings.Repeat("v", i))}})
		tr.mu.RLock()
		if g := tr.s.Arena.Garbage; g == 0 {
			compactions++
		}
		chunks = len(tr.s.Arena.Chunks)
		tr.mu.RUnlock()
	}
	if compactions == 0 {
		t.Fatal("the arena was never compacted")
	}
	m.check(t, tr)
	t.Logf("%d compactions, %d chunks", compactions, chunks)
}
