package catalog

import (
	"github.com/metatree/metatree/catalog/internal/layout"
	"github.com/metatree/metatree/internal/benchshape"

	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// viewNode copies what a View reports through its accessors (not through
// View.Node, which shares the copying code of Get) into a Node.
func viewNode(t *testing.T, v View) Node {
	t.Helper()
	n := Node{ID: v.ID(), Parent: v.ParentID(), Name: v.Name(), Path: string(v.AppendPath(nil)),
		Kind: v.Kind(), Created: v.Created(), Modified: v.Modified()}
	for k, val := range v.Attrs() {
		if n.Attrs == nil {
			n.Attrs = map[string]Value{}
		}
		n.Attrs[k] = val
		if got, ok := v.Attr(k); !ok || !got.Equal(val) {
			t.Fatalf("%s: Attr(%q) = %v, %v; Attrs yields %v", n.Path, k, got, ok, val)
		}
	}
	if v.NumAttrs() != len(n.Attrs) {
		t.Fatalf("%s: NumAttrs %d, Attrs yields %d", n.Path, v.NumAttrs(), len(n.Attrs))
	}
	if _, ok := v.Attr("no-such-key"); ok {
		t.Fatalf("%s: Attr of a key never interned found a value", n.Path)
	}
	if p, ok := v.Parent(); ok != (n.ID != layout.RootID) || (ok && p.ID() != n.Parent) {
		t.Fatalf("%s: Parent() = %d, %v; ParentID %d", n.Path, p.ID(), ok, n.Parent)
	}
	return n
}

func ids(nodes []Node) []uint64 {
	out := make([]uint64, len(nodes))
	for i, n := range nodes {
		out[i] = n.ID
	}
	return out
}

func viewIDs(seq func(func(View) bool)) []uint64 {
	var out []uint64
	for v := range seq {
		out = append(out, v.ID())
	}
	slices.Sort(out)
	return out
}

// checkViews compares every read through Tree.Read with the copying reads.
func checkViews(t *testing.T, tr *Tree) {
	t.Helper()
	var want []Node
	walkTree(tr, func(n Node) { want = append(want, n) })
	kids := map[string][]string{}
	for _, n := range want {
		kids[n.Path] = tr.Children(n.Path)
	}
	ofKind := map[string][]uint64{}
	found := map[string][]uint64{}
	kinds := []string{"", "k1", "k2", "k3", "k9"}
	for _, k := range kinds {
		ofKind[k] = ids(tr.OfKind(k))
		for _, a := range []string{"x", "y", "z", "w"} {
			for _, v := range testValues {
				found[fmt.Sprint(k, a, v.Type(), v)] = ids(tr.Find(k, a, v))
			}
		}
	}
	index, length := tr.Index(), tr.Len()

	tr.Read(func(r Reader) {
		if r.Index() != index || r.Len() != length {
			t.Fatalf("Reader at index %d with %d nodes, tree at %d with %d", r.Index(), r.Len(), index, length)
		}
		i := 0
		for v := range r.Root().Subtree() {
			if i >= len(want) {
				t.Fatalf("Subtree yields more than the %d nodes of the tree", len(want))
			}
			got := viewNode(t, v)
			if !nodeEqual(got, want[i]) || !nodeEqual(v.Node(), want[i]) {
				t.Fatalf("Subtree node %d: view %+v, Node() %+v, Get %+v", i, got, v.Node(), want[i])
			}
			if v.Path() != want[i].Path {
				t.Fatalf("Path() = %q, want %q", v.Path(), want[i].Path)
			}
			byPath, ok := r.Get(want[i].Path)
			if !ok || byPath.ID() != want[i].ID {
				t.Fatalf("Get(%q) = %d, %v; want id %d", want[i].Path, byPath.ID(), ok, want[i].ID)
			}
			byID, ok := r.GetID(want[i].ID)
			if !ok || byID.Name() != want[i].Name || string(byID.AppendPath(nil)) != want[i].Path {
				t.Fatalf("GetID(%d) = %q, %v; want %q", want[i].ID, byID.Path(), ok, want[i].Path)
			}
			var names []string
			for c := range v.Children() {
				names = append(names, c.Name())
				if cv, ok := v.Child(c.Name()); !ok || cv.ID() != c.ID() {
					t.Fatalf("%s: Child(%q) = %d, %v; Children yields %d", want[i].Path, c.Name(), cv.ID(), ok, c.ID())
				}
				if c.ParentID() != v.ID() {
					t.Fatalf("%s: child %q has parent %d", want[i].Path, c.Name(), c.ParentID())
				}
			}
			if !slices.Equal(names, kids[want[i].Path]) || v.NumChildren() != len(names) {
				t.Fatalf("%s: Children yields %q (NumChildren %d), want %q", want[i].Path, names, v.NumChildren(), kids[want[i].Path])
			}
			if _, ok := v.Child("no-such-child"); ok {
				t.Fatalf("%s: Child of an absent name found one", want[i].Path)
			}
			i++
		}
		if i != len(want) {
			t.Fatalf("Subtree yields %d nodes, the tree has %d", i, len(want))
		}
		for _, bad := range []string{"", "x", "/a//b", "/a/", "/no/such/node"} {
			if _, ok := r.Get(bad); ok {
				t.Fatalf("Get(%q) found a node", bad)
			}
		}
		if _, ok := r.GetID(1 << 40); ok {
			t.Fatal("GetID of an id never assigned found a node")
		}
		for _, k := range kinds {
			if got := viewIDs(r.OfKind(k)); !slices.Equal(got, ofKind[k]) && (len(got) > 0 || len(ofKind[k]) > 0) {
				t.Fatalf("OfKind(%q) = %v, want %v", k, got, ofKind[k])
			}
			for _, a := range []string{"x", "y", "z", "w"} {
				for _, v := range testValues {
					key := fmt.Sprint(k, a, v.Type(), v)
					if got := viewIDs(r.Find(k, a, v)); !slices.Equal(got, found[key]) && (len(got) > 0 || len(found[key]) > 0) {
						t.Fatalf("Find(%q, %q, %v) = %v, want %v", k, a, v, got, found[key])
					}
				}
			}
		}
		if got := viewIDs(r.Find("k1", "x", Value{})); got != nil {
			t.Fatalf("Find of an invalid value = %v", got)
		}
	})
}

// TestReadViewsAgainstCopies runs random batches (creates, updates, moves,
// deletes, index changes, compaction) and checks after many of them that
// every view read agrees with the copying API.
func TestReadViewsAgainstCopies(t *testing.T) {
	defer func(m int64) { compactMin = m }(compactMin)
	compactMin = 0
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			m := newModel()
			tr := New()
			for i := uint64(1); i <= 600; i++ {
				batch := randBatch(r, m)
				data, err := batch.Encode()
				if err != nil {
					t.Fatal(err)
				}
				applyChecked(t, tr, m, i, batch, data)
				if i%50 == 0 {
					checkViews(t, tr)
				}
			}
			if tr.Len() < 10 {
				t.Fatalf("only %d nodes: the generator built nothing to read", tr.Len())
			}
		})
	}
}

// TestReadIteratorsStop checks that breaking out of each iterator stops it.
func TestReadIteratorsStop(t *testing.T) {
	tr := New()
	next, _, _ := buildDoris(t, benchshape.Doris{DBs: 2, Tables: 2, Parts: 2, Tablets: 3, Replicas: 3, Workers: 5}, tr, 1, 50)
	_ = next
	tr.Read(func(r Reader) {
		count := func(name string, seq func(func(View) bool)) {
			n := 0
			for range seq {
				n++
				if n == 2 {
					break
				}
			}
			if n != 2 {
				t.Fatalf("%s yielded %d before the break, want 2", name, n)
			}
		}
		db, _ := r.Get("/db00")
		count("Children", db.Children())
		count("Subtree", r.Root().Subtree())
		count("OfKind", r.OfKind("replica"))
		count("Find indexed", r.Find("replica", "worker", Int(1)))
		count("Find scanned", r.Find("replica", "state", String("NORMAL")))
		rep, _ := r.Get("/db00/tbl00/p0/tablet1/r0")
		n := 0
		for range rep.Attrs() {
			n++
			break
		}
		if n != 1 {
			t.Fatalf("Attrs yielded %d before the break", n)
		}
	})
}

// TestReadAllocations pins the zero-allocation read paths at zero.
func TestReadAllocations(t *testing.T) {
	tr := New()
	buildDoris(t, benchshape.Doris{DBs: 2, Tables: 3, Parts: 2, Tablets: 10, Replicas: 3, Workers: 5}, tr, 1, 100)
	const path = "/db01/tbl02/p1/tablet115/r2"
	var id uint64
	tr.Read(func(r Reader) {
		v, ok := r.Get(path)
		if !ok {
			t.Fatalf("no %s", path)
		}
		id = v.ID()
	})
	buf := make([]byte, 0, 128)
	// Each read returns how many nodes (or bytes) it saw, so that a read
	// that finds nothing fails instead of passing for free.
	cases := []struct {
		name string
		read func(r Reader) int
		want int
	}{
		{"Get", func(r Reader) int {
			v, _ := r.Get(path)
			return int(min(v.ID(), 1)+min(v.ParentID(), 1)+min(v.Created(), 1)+min(v.Modified(), 1)) + len(v.Name()) + len(v.Kind())
		}, 4 + len("r2") + len("replica")},
		{"GetID", func(r Reader) int {
			v, ok := r.GetID(id)
			if !ok {
				return 0
			}
			return len(v.Name())
		}, len("r2")},
		{"Attr", func(r Reader) int {
			v, _ := r.GetID(id)
			s, _ := v.Attr("state")
			w, ok := v.Attr("worker")
			if !ok {
				return 0
			}
			return len(s.Str()) + min(int(w.Int64()), 0) + 1
		}, len("NORMAL") + 1},
		{"Attrs", func(r Reader) int {
			v, _ := r.GetID(id)
			n := 0
			for k, a := range v.Attrs() {
				n += len(k) + len(a.Str())
			}
			return n
		}, len("size") + len("state") + len("NORMAL") + len("version") + len("worker")},
		{"AppendPath", func(r Reader) int {
			v, _ := r.GetID(id)
			buf = v.AppendPath(buf[:0])
			return len(buf)
		}, len(path)},
		{"Child", func(r Reader) int {
			v, _ := r.Get("/db01/tbl02/p1")
			c, _ := v.Child("tablet115")
			return c.NumChildren()
		}, 3},
		{"Children", func(r Reader) int {
			v, _ := r.Get("/db01/tbl02/p1")
			n := 0
			for c := range v.Children() {
				n += min(int(c.ID()), 1)
			}
			return n
		}, 10},
		{"Subtree", func(r Reader) int {
			v, _ := r.Get("/db01")
			n := 0
			for c := range v.Subtree() {
				n += min(int(c.ID()), 1)
			}
			return n
		}, 1 + 3 + 3*2 + 3*2*10 + 3*2*10*3},
		{"OfKind", func(r Reader) int {
			n := 0
			for range r.OfKind("tablet") {
				n++
			}
			return n
		}, 2 * 3 * 2 * 10},
		{"FindIndexed", func(r Reader) int {
			n := 0
			for range r.Find("replica", "worker", Int(3)) {
				n++
			}
			return n
		}, 2 * 3 * 2 * 10 * 3 / 5},
		{"FindScanned", func(r Reader) int {
			n := 0
			for range r.Find("replica", "state", String("NORMAL")) {
				n++
			}
			return n
		}, 2 * 3 * 2 * 10 * 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := 0
			read := func(r Reader) { got = c.read(r) }
			if a := testing.AllocsPerRun(100, func() { tr.Read(read) }); a != 0 {
				t.Errorf("%v allocations a read, want 0", a)
			}
			if got != c.want {
				t.Errorf("the read counted %d, want %d", got, c.want)
			}
		})
	}
}

// TestReadSeesWholeBatches reads the bank through views while the applier
// moves money, swaps owners, replaces and renames accounts: every Read must
// see the invariants of a batch boundary, through children, the index and
// the kind set alike.
func TestReadSeesWholeBatches(t *testing.T) {
	tr, next := bankTree(t)
	done := make(chan struct{})
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	reads := 0
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			var err error
			tr.Read(func(r Reader) {
				bank, ok := r.Get("/bank")
				if !ok {
					err = fmt.Errorf("no /bank at %d", r.Index())
					return
				}
				sum, n, owner0 := int64(0), 0, 0
				for a := range bank.Children() {
					b, _ := a.Attr("bal")
					o, _ := a.Attr("owner")
					sum += b.Int64()
					n++
					if o.Int64() == 0 {
						owner0++
					}
				}
				found := 0
				for range r.Find("acct", "owner", Int(0)) {
					found++
				}
				kind := 0
				for range r.OfKind("acct") {
					kind++
				}
				if n != bankAccounts || sum != bankTotal || owner0 != bankAccounts/2 || found != owner0 || kind != n {
					err = fmt.Errorf("at %d: %d accounts (%d of the kind), sum %d, %d with owner 0 (%d found): half a batch",
						r.Index(), n, kind, sum, owner0, found)
				}
			})
			if err != nil {
				errs <- err
				return
			}
			reads++
		}
	})
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 1500; i++ {
		mustApply(t, tr, next, bankBatch(r, tr))
		next++
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if reads == 0 {
		t.Fatal("the reader never ran")
	}
}

// TestChildrenGroups iterates child lists of several sizes, whole and
// broken off after each child: every child is yielded once, in name order,
// without allocating.
func TestChildrenGroups(t *testing.T) {
	sizes := []int{0, 1, 15, 16, 17, 32, 53}
	tr := New()
	var ops []Op
	for _, n := range sizes {
		p := fmt.Sprintf("/p%d", n)
		ops = append(ops, Op{Type: OpCreate, Path: p, Kind: "dir"})
		for i := range n {
			// Created out of name order, so that slots do not follow names.
			ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("%s/c%03d", p, (i*7)%n), Kind: "file"})
		}
	}
	mustApply(t, tr, 1, Batch{Ops: ops})
	for _, n := range sizes {
		p := fmt.Sprintf("/p%d", n)
		want := tr.Children(p)
		if len(want) != n {
			t.Fatalf("%s has %d children, want %d", p, len(want), n)
		}
		for stop := 1; stop <= n+1; stop++ {
			var got []string
			tr.Read(func(r Reader) {
				v, _ := r.Get(p)
				for c := range v.Children() {
					got = append(got, c.Name())
					if len(got) == stop {
						break
					}
				}
			})
			if k := min(stop, n); !slices.Equal(got, want[:k]) {
				t.Fatalf("%s, stopping after %d: Children yields %q, want %q", p, stop, got, want[:k])
			}
		}
		count := 0
		read := func(r Reader) {
			v, _ := r.Get(p)
			for c := range v.Children() {
				count += min(len(c.Name()), 1)
			}
		}
		if a := testing.AllocsPerRun(20, func() { tr.Read(read) }); a != 0 {
			t.Errorf("%s: Children makes %v allocations, want 0", p, a)
		}
		if count != 21*n {
			t.Errorf("%s: Children yielded %d nodes in 21 reads, want %d", p, count, 21*n)
		}
	}
}
