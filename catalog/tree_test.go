package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// walkTree calls fn for every node of tr, depth first, children in name
// order.
func walkTree(tr *Tree, fn func(n Node)) {
	var walk func(p string)
	walk = func(p string) {
		n, _ := tr.Get(p)
		fn(n)
		for _, c := range tr.Children(p) {
			if p == "/" {
				walk("/" + c)
			} else {
				walk(p + "/" + c)
			}
		}
	}
	walk("/")
}

// dump renders the whole tree, one node a line, depth first.
func dump(tr *Tree) string {
	var sb strings.Builder
	walkTree(tr, func(n Node) {
		keys := make([]string, 0, len(n.Attrs))
		for k := range n.Attrs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fmt.Fprintf(&sb, "%s id=%d parent=%d kind=%q created=%d modified=%d", n.Path, n.ID, n.Parent, n.Kind, n.Created, n.Modified)
		for _, k := range keys {
			fmt.Fprintf(&sb, " %s=%s:%v", k, n.Attrs[k].Type(), n.Attrs[k])
		}
		sb.WriteByte('\n')
	})
	return sb.String()
}

func encode(t testing.TB, ops ...Op) []byte {
	t.Helper()
	d, err := Batch{Ops: ops}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestApplyOperations(t *testing.T) {
	tr := New()
	res := tr.Apply(5, encode(t,
		Op{Type: OpCreate, Path: "/db1", Kind: "database"},
		Op{Type: OpCreate, Path: "/db1/orders", Kind: "table", Set: map[string]Value{"rows": Int(10), "engine": String("olap")}},
		Op{Type: OpCreate, Path: "/db1/orders/p2024", Kind: "partition"},
		Op{Type: OpCheck, Path: "/db1/orders", Cond: Cond{Modified: 5}},
	)).(*Result)
	if res.Err != nil || !slices.Equal(res.IDs, []uint64{2, 3, 4, 3}) || res.Index != 5 {
		t.Fatalf("result %+v", res)
	}
	n, ok := tr.Get("/db1/orders/p2024")
	if !ok || n.ID != 4 || n.Parent != 3 || n.Name != "p2024" || n.Kind != "partition" || n.Created != 5 || n.Modified != 5 || n.Path != "/db1/orders/p2024" {
		t.Fatalf("Get: %+v, %v", n, ok)
	}
	byID, _ := tr.GetID(3)
	if byID.Path != "/db1/orders" || byID.Attrs["rows"].Int64() != 10 {
		t.Fatalf("GetID(3): %+v", byID)
	}

	// Update: set and unset; modified moves, created stays.
	res = tr.Apply(6, encode(t, Op{Type: OpUpdate, Path: "/db1/orders", Set: map[string]Value{"rows": Int(11)}, Unset: []string{"engine"}, Cond: Cond{Modified: 5}})).(*Result)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	n, _ = tr.Get("/db1/orders")
	if n.Attrs["rows"].Int64() != 11 || len(n.Attrs) != 1 || n.Modified != 6 || n.Created != 5 {
		t.Fatalf("after update: %+v", n)
	}

	// Rename within the parent, then move to another parent.
	tr.Apply(7, encode(t, Op{Type: OpCreate, Path: "/db2", Kind: "database"}))
	res = tr.Apply(8, encode(t,
		Op{Type: OpMove, Path: "/db1/orders", To: "/db1/sales"},
		Op{Type: OpMove, Path: "/db1/sales", To: "/db2/sales"},
	)).(*Result)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if _, ok := tr.Get("/db1/orders"); ok {
		t.Fatal("old path still resolves")
	}
	n, ok = tr.Get("/db2/sales/p2024")
	if !ok || n.ID != 4 || n.Parent != 3 {
		t.Fatalf("moved subtree: %+v %v", n, ok)
	}
	if moved, _ := tr.Get("/db2/sales"); moved.ID != 3 || moved.Modified != 8 || moved.Parent != 5 || moved.Name != "sales" {
		t.Fatalf("moved node: %+v", moved)
	}
	if got := tr.Children("/"); !slices.Equal(got, []string{"db1", "db2"}) {
		t.Fatalf("Children(/) = %q", got)
	}

	// Delete: not empty without Recursive; recursive deletes the subtree.
	res = tr.Apply(9, encode(t, Op{Type: OpDelete, Path: "/db2"})).(*Result)
	if !errors.Is(res.Err, ErrNotEmpty) {
		t.Fatalf("delete of a non-empty node: %v", res.Err)
	}
	res = tr.Apply(10, encode(t, Op{Type: OpDelete, Path: "/db2", Recursive: true})).(*Result)
	if res.Err != nil || !slices.Equal(res.IDs, []uint64{5}) {
		t.Fatalf("recursive delete: %+v", res)
	}
	if tr.Len() != 2 || len(tr.OfKind("partition")) != 0 {
		t.Fatalf("after delete: %d nodes", tr.Len())
	}
	if _, ok := tr.GetID(4); ok {
		t.Fatal("deleted id still resolves")
	}
	// Ids are never reused.
	res = tr.Apply(11, encode(t, Op{Type: OpCreate, Path: "/db3", Kind: "database"})).(*Result)
	if res.IDs[0] != 6 {
		t.Fatalf("new id %d, want 6", res.IDs[0])
	}
}

func TestFailedBatchChangesNothing(t *testing.T) {
	tr := New()
	tr.Apply(1, encode(t, Op{Type: OpCreate, Path: "/a", Kind: "k", Set: map[string]Value{"v": Int(1)}}))
	before := dump(tr)
	cases := []struct {
		name string
		ops  []Op
		op   int
		want error
	}{
		{"absent", []Op{{Type: OpCreate, Path: "/b", Kind: "k"}, {Type: OpCheck, Path: "/a", Cond: Cond{Absent: true}}}, 1, ErrConflict},
		{"exists", []Op{{Type: OpCreate, Path: "/b", Kind: "k"}, {Type: OpDelete, Path: "/c", Cond: Cond{Exists: true}}}, 1, ErrConflict},
		{"modified", []Op{{Type: OpUpdate, Path: "/a", Set: map[string]Value{"v": Int(2)}}, {Type: OpCheck, Path: "/a", Cond: Cond{Modified: 1}}}, 1, ErrConflict},
		{"check absent node", []Op{{Type: OpCreate, Path: "/b", Kind: "k"}, {Type: OpCheck, Path: "/zz"}}, 1, ErrConflict},
		{"kind", []Op{{Type: OpUpdate, Path: "/a", Kind: "other", Set: map[string]Value{"v": Int(3)}}}, 0, ErrConflict},
		{"exists already", []Op{{Type: OpCreate, Path: "/b", Kind: "k"}, {Type: OpCreate, Path: "/b", Kind: "k"}}, 1, ErrExists},
		{"no parent", []Op{{Type: OpCreate, Path: "/b", Kind: "k"}, {Type: OpCreate, Path: "/x/y", Kind: "k"}}, 1, ErrNotFound},
		{"update missing", []Op{{Type: OpCreate, Path: "/b", Kind: "k"}, {Type: OpUpdate, Path: "/x"}}, 1, ErrNotFound},
		{"move onto existing", []Op{{Type: OpCreate, Path: "/b", Kind: "k"}, {Type: OpMove, Path: "/a", To: "/b"}}, 1, ErrExists},
		{"move to missing parent", []Op{{Type: OpMove, Path: "/a", To: "/q/a"}}, 0, ErrNotFound},
		{"delete then use", []Op{{Type: OpCreate, Path: "/a/c", Kind: "k"}, {Type: OpDelete, Path: "/a", Recursive: true}, {Type: OpUpdate, Path: "/a/c"}}, 2, ErrNotFound},
		{"drop missing index", []Op{{Type: OpCreateIndex, Kind: "k", Attr: "v"}, {Type: OpDropIndex, Kind: "k", Attr: "w"}}, 1, ErrNotFound},
		{"index twice", []Op{{Type: OpCreateIndex, Kind: "k", Attr: "v"}, {Type: OpCreateIndex, Kind: "k", Attr: "v"}}, 1, ErrExists},
	}
	index := uint64(1)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			index++
			res := tr.Apply(index, encode(t, c.ops...)).(*Result)
			var oe *OpError
			if !errors.Is(res.Err, c.want) || !errors.As(res.Err, &oe) || oe.Op != c.op || oe.Type != c.ops[c.op].Type || oe.Path != c.ops[c.op].Path {
				t.Fatalf("error %v, want %v at op %d", res.Err, c.want, c.op)
			}
			if !strings.Contains(res.Err.Error(), "op ") || res.IDs != nil || tr.Index() != index {
				t.Fatalf("error text %q, ids %v, index %d", res.Err, res.IDs, tr.Index())
			}
			if after := dump(tr); after != before {
				t.Fatalf("failed batch changed the tree:\n%s\nwas\n%s", after, before)
			}
			if tr.HasIndex("k", "v") {
				t.Fatal("failed batch left an index")
			}
		})
	}
	// The id counter was not advanced by the failed creates.
	res := tr.Apply(100, encode(t, Op{Type: OpCreate, Path: "/n", Kind: "k"})).(*Result)
	if res.IDs[0] != 3 {
		t.Fatalf("id after failed batches = %d, want 3", res.IDs[0])
	}
}

func TestApplyIndexOrder(t *testing.T) {
	tr := New()
	d := encode(t, Op{Type: OpCreate, Path: "/a", Kind: "k"})
	if res := tr.Apply(0, d).(*Result); !errors.Is(res.Err, ErrApplied) {
		t.Fatalf("index 0: %v", res.Err)
	}
	tr.Apply(4, d)
	for _, idx := range []uint64{3, 4} {
		if res := tr.Apply(idx, encode(t, Op{Type: OpCreate, Path: "/b", Kind: "k"})).(*Result); !errors.Is(res.Err, ErrApplied) {
			t.Fatalf("index %d after 4: %v", idx, res.Err)
		}
	}
	if _, ok := tr.Get("/b"); ok || tr.Index() != 4 {
		t.Fatal("a stale entry was applied")
	}
}

func TestReadsOfBadPaths(t *testing.T) {
	tr := sampleTree(t)
	for _, p := range []string{"", "db1", "/db1/", "/db1//t1", "/nope"} {
		if _, ok := tr.Get(p); ok {
			t.Errorf("Get(%q) found something", p)
		}
		if c := tr.Children(p); c != nil {
			t.Errorf("Children(%q) = %q", p, c)
		}
	}
	if n := tr.OfKind("nokind"); n != nil {
		t.Errorf("OfKind of an unknown kind: %v", n)
	}
	if n := tr.Find("replica", "nokey", Int(1)); n != nil {
		t.Errorf("Find on an unknown attribute: %v", n)
	}
	if n := tr.Find("replica", "worker", Value{}); n != nil {
		t.Errorf("Find of the zero Value: %v", n)
	}
	// Without an index Find scans, with the same answer.
	if got := tr.Find("table", "rows", Int(-3)); len(got) != 1 || got[0].Path != "/db1/t1" {
		t.Errorf("Find without index: %+v", got)
	}
}

func TestValueJSON(t *testing.T) {
	for _, v := range testValues {
		b, err := v.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var w Value
		if err := w.UnmarshalJSON(b); err != nil || !w.Equal(v) {
			t.Fatalf("%v -> %s -> %v (%v)", v, b, w, err)
		}
	}
	var w Value
	for _, bad := range []string{"1.5", "null", `{"x":1}`, `{"bytes":"!!"}`, "99999999999999999999", ""} {
		if err := w.UnmarshalJSON([]byte(bad)); err == nil {
			t.Errorf("UnmarshalJSON(%s) accepted", bad)
		}
	}
	if _, err := (Value{}).MarshalJSON(); err == nil {
		t.Error("marshalled the zero Value")
	}
}

// TestNodeSizeLimit: updates cannot grow a node past the limit that Load
// enforces, so every tree Apply builds can be saved and loaded.
func TestNodeSizeLimit(t *testing.T) {
	tr := New()
	tr.Apply(1, encode(t, Op{Type: OpCreate, Path: "/big", Kind: "k"}))
	big := Bytes(make([]byte, MaxValueLen))
	var err error
	index := uint64(1)
	for i := 0; i < 6 && err == nil; i++ {
		index++
		err = tr.Apply(index, encode(t, Op{Type: OpUpdate, Path: "/big", Set: map[string]Value{fmt.Sprintf("k%d", i): big}})).(*Result).Err
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("growing a node past %d bytes: %v", MaxAttrsBytes, err)
	}
	img := saveBytes(t, tr)
	if err := New().Load(bytes.NewReader(img)); err != nil {
		t.Fatalf("Load of a tree Apply built: %v", err)
	}
}
