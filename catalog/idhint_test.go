package catalog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/metatree/metatree/catalog/internal/layout"
)

// requireLookupAgrees checks LookupID against the id table for every id
// up to past the tree's counter, present or not, and Reader.GetID against
// both; it returns how many of the pages holding ids have their hint
// affine, and how many do not.
func requireLookupAgrees(t *testing.T, tr *Tree) (affine, off int) {
	t.Helper()
	s := tr.s
	for id := uint64(0); id < s.nextID+2*layout.IDPageSize; id++ {
		want, wantOK := s.SlotOf(id)
		got, ok := s.LookupID(id)
		if ok != wantOK || (ok && got != want) {
			t.Fatalf("id %d: lookupID %d %v, the table %d %v", id, got, ok, want, wantOK)
		}
		tr.Read(func(r Reader) {
			if v, ok := r.GetID(id); ok != wantOK || (ok && v.ID() != id) {
				t.Fatalf("id %d: GetID found %v (id %d), the table %v", id, ok, v.ID(), wantOK)
			}
		})
	}
	affine, off = s.HintedPages()
	return affine, off
}

// TestLookupIDAgreesWithTheTable: readers find every id's slot through the
// pages' hints exactly as through the id table, while a catalog grows
// (every page affine), after deletions and creations that reuse slots
// (pages turn off), after a failed batch's rollback, and after a Save and
// Load (the image's id order makes dense pages affine again).
func TestLookupIDAgreesWithTheTable(t *testing.T) {
	const n = 3 * layout.IDPageSize
	tr := New()
	ops := []Op{{Type: OpCreate, Path: "/a", Kind: "dir"}}
	for i := range n {
		ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/a/n%d", i), Kind: "k"})
	}
	mustApply(t, tr, 1, Batch{Ops: ops})
	if affine, off := requireLookupAgrees(t, tr); affine == 0 || off != 0 {
		t.Fatalf("a catalog that only grew has %d affine pages and %d others", affine, off)
	}

	r := rand.New(rand.NewPCG(1, 2))
	index := uint64(2)
	var del []Op
	for _, i := range r.Perm(n)[:200] {
		del = append(del, Op{Type: OpDelete, Path: fmt.Sprintf("/a/n%d", i)})
	}
	mustApply(t, tr, index, Batch{Ops: del})
	index++
	if affine, off := requireLookupAgrees(t, tr); affine == 0 || off != 0 {
		t.Fatalf("deletions turned hints off: %d affine, %d others", affine, off)
	}
	var add []Op
	for i := range 300 {
		add = append(add, Op{Type: OpCreate, Path: fmt.Sprintf("/a/m%d", i), Kind: "k"})
	}
	mustApply(t, tr, index, Batch{Ops: add}) // reuses the deleted nodes' slots
	index++
	if _, off := requireLookupAgrees(t, tr); off == 0 {
		t.Fatal("every page is still affine after slots were reused")
	}

	// A batch that creates and deletes, then fails, is rolled back.
	failing := Batch{Ops: []Op{
		{Type: OpCreate, Path: "/a/x1", Kind: "k"},
		{Type: OpDelete, Path: "/a/m1"},
		{Type: OpCreate, Path: "/a/x2", Kind: "k"},
		{Type: OpCreate, Path: "/missing/x3", Kind: "k"},
	}}
	data, err := failing.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if res := tr.Apply(index, data).(*Result); res.Err == nil {
		t.Fatal("the batch creating under a missing parent applied")
	}
	index++
	if _, off := requireLookupAgrees(t, tr); off == 0 {
		t.Fatal("the rollback turned the reused pages' hints back on")
	}

	var img bytes.Buffer
	if err := tr.Save(&img); err != nil {
		t.Fatal(err)
	}
	loaded := New()
	if err := loaded.Load(&img); err != nil {
		t.Fatal(err)
	}
	if affine, off := requireLookupAgrees(t, loaded); affine == 0 || off == 0 {
		t.Fatalf("after a Load: %d affine pages (dense ones), %d others (with gaps)", affine, off)
	}
}
