package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/metatree/metatree/catalog/internal/layout"
)

// A node with more children than the largest size class holds (786,432)
// keeps all of them through Apply, and an image of it loads: the loader
// appends into the same regions.
func TestMoreChildrenThanTheLargestClass(t *testing.T) {
	tr := New()
	mustApply(t, tr, 1, Batch{Ops: []Op{{Type: OpCreate, Path: "/d", Kind: "dir"}}})
	n := int(layout.LargestKidClass) + 5
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

// A list too big for the size classes gets a chunk of its own; releasing it
// frees the chunk's index for the next one. Handles have room for
// kidMaxChunks chunk indexes, so without reuse the handle of the
// kidMaxChunks-th huge list wraps to 0 ("no list").
// An insert that needs a chunk when none is left fails with ErrCapacity and
// leaves the list as it was; the chunks kept in reserve still serve
// rollbacks, and a released chunk serves the next insert.
// A batch whose create or move finds no room for a child list fails with
// ErrCapacity and changes nothing; once room is back, writes go on.
func TestApplyRefusesChildListOverflow(t *testing.T) {
	tr := New()
	mustApply(t, tr, 1, Batch{Ops: []Op{
		{Type: OpCreate, Path: "/a", Kind: "dir"},
		{Type: OpCreate, Path: "/b", Kind: "dir"},
		{Type: OpCreate, Path: "/a/x", Kind: "k"},
	}})
	// Leave batches no chunk: the current one full, no new one allowed.
	restore := tr.s.Kids.Exhaust()

	for _, b := range []Batch{
		{Ops: []Op{{Type: OpCreate, Path: "/a/y", Kind: "k"}, {Type: OpCreate, Path: "/b/z", Kind: "k"}}},
		{Ops: []Op{{Type: OpMove, Path: "/a/x", To: "/b/x"}}},
	} {
		data, err := b.Encode()
		if err != nil {
			t.Fatal(err)
		}
		index := tr.Index() + 1
		res := tr.Apply(index, data).(*Result)
		var opErr *OpError
		if !errors.As(res.Err, &opErr) || !errors.Is(res.Err, ErrCapacity) {
			t.Fatalf("apply %d: %v, want an *OpError wrapping ErrCapacity", index, res.Err)
		}
		if got := tr.Children("/a"); !slices.Equal(got, []string{"x"}) {
			t.Fatalf("after the refused batch /a has %v", got)
		}
		if got := tr.Children("/b"); len(got) != 0 {
			t.Fatalf("after the refused batch /b has %v", got)
		}
		if tr.Len() != 4 || tr.Index() != index {
			t.Fatalf("after the refused batch: %d nodes at index %d, want 4 at %d", tr.Len(), tr.Index(), index)
		}
	}

	restore()
	mustApply(t, tr, tr.Index()+1, Batch{Ops: []Op{{Type: OpMove, Path: "/a/x", To: "/b/x"}, {Type: OpCreate, Path: "/b/z", Kind: "k"}}})
	if got := tr.Children("/b"); !slices.Equal(got, []string{"x", "z"}) {
		t.Fatalf("/b has %v, want [x z]", got)
	}
}
