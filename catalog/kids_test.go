package catalog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestKidPoolAgainstSlices(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	var p kidPool
	const lists = 50
	handles := make([]uint32, lists)
	ref := make([][]uint32, lists)
	for i := 0; i < 100000; i++ {
		l := r.IntN(lists)
		if l == 0 && i%2 == 0 {
			// One list grows big enough to leave the size classes.
			handles[l] = p.insert(handles[l], len(ref[l]), uint32(i))
			ref[l] = append(ref[l], uint32(i))
			continue
		}
		if len(ref[l]) > 0 && r.IntN(2) == 0 {
			pos := r.IntN(len(ref[l]))
			handles[l] = p.remove(handles[l], pos)
			ref[l] = slices.Delete(ref[l], pos, pos+1)
		} else {
			pos := r.IntN(len(ref[l]) + 1)
			handles[l] = p.insert(handles[l], pos, uint32(i))
			ref[l] = slices.Insert(ref[l], pos, uint32(i))
		}
		if (handles[l] == 0) != (len(ref[l]) == 0) {
			t.Fatalf("list %d: handle %d with %d entries", l, handles[l], len(ref[l]))
		}
	}
	for l := range ref {
		if got := p.list(handles[l]); !slices.Equal(got, ref[l]) {
			t.Fatalf("list %d: %d entries, want %d", l, len(got), len(ref[l]))
		}
	}
	if len(ref[0]) <= int(kidClasses[len(kidClasses)-1])/20 && len(ref[0]) < 40000 {
		t.Logf("big list has %d entries", len(ref[0]))
	}
}

func TestKidPoolHugeList(t *testing.T) {
	var p kidPool
	var h uint32
	const n = 900000 // beyond the largest class
	for i := 0; i < n; i++ {
		h = p.insert(h, i, uint32(i))
	}
	h = p.insert(h, 0, 7)
	l := p.list(h)
	if len(l) != n+1 || l[0] != 7 {
		t.Fatalf("huge list: len %d, head %d", len(l), l[0])
	}
	for i, v := range l[1:] { // every slot survived the moves out of the classes
		if v != uint32(i) {
			t.Fatalf("huge list: l[%d] = %d, want %d", i+1, v, i)
		}
	}
	h = p.remove(h, 0)
	for i := n - 1; i >= 0; i-- {
		h = p.remove(h, i)
	}
	if h != 0 {
		t.Fatalf("emptied list has handle %d", h)
	}
}

// A node with more children than the largest size class holds (786,432)
// keeps all of them through Apply, and an image of it loads: the loader
// appends into the same regions.
func TestMoreChildrenThanTheLargestClass(t *testing.T) {
	tr := New()
	mustApply(t, tr, 1, Batch{Ops: []Op{{Type: OpCreate, Path: "/d", Kind: "dir"}}})
	n := int(kidClasses[len(kidClasses)-1]) + 5
	index := uint64(2)
	for i := 0; i < n; index++ {
		var ops []Op
		for ; len(ops) < 50000 && i < n; i++ {
			ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/d/c%07d", i), Kind: "k"})
		}
		mustApply(t, tr, index, Batch{Ops: ops})
	}
	check := func(tr *Tree) {
		t.Helper()
		kids := tr.Children("/d")
		if len(kids) != n {
			t.Fatalf("%d children, want %d", len(kids), n)
		}
		for i, k := range kids {
			if want := fmt.Sprintf("c%07d", i); k != want {
				t.Fatalf("child %d is %q, want %q", i, k, want)
			}
		}
		for _, i := range []int{0, n / 2, n - 1} {
			if _, ok := tr.Get(fmt.Sprintf("/d/c%07d", i)); !ok {
				t.Fatalf("Get /d/c%07d: not found", i)
			}
		}
	}
	check(tr)
	loaded := New()
	if err := loaded.Load(bytes.NewReader(saveBytes(t, tr))); err != nil {
		t.Fatal(err)
	}
	check(loaded)
}
