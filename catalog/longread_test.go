package catalog

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLongReadSeesItsIndex starts a long read, applies hundreds of random
// batches (updates, deletes that free and reuse slots, moves, index changes),
// then finishes the read: it must see exactly the tree of its start index.
func TestLongReadSeesItsIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tr, m, step := randomApplier(t, r)
	step(400)
	want := saveBytes(t, tr)
	wantNodes := map[string][]Node{}
	for _, k := range []string{"k1", "k2", "k3"} {
		wantNodes[k] = tr.OfKind(k)
	}

	lr := tr.beginLong()
	tr.mu.RLock()
	slots := map[string][]uint32{}
	for _, k := range []string{"k1", "k2", "k3"} {
		if ki, ok := tr.s.kindIdx[k]; ok {
			slots[k] = tr.s.kindSets[ki].AppendTo(nil)
		}
	}
	tr.mu.RUnlock()

	step(400)
	if slices.Equal(saveBytes(t, tr), want) {
		t.Fatal("the tree did not change: the test proves nothing")
	}
	var got bytes.Buffer
	if err := tr.saveFrom(lr, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("save through a long read started at %d differs from the save made then", lr.v)
	}
	for k, ss := range slots {
		gotNodes := lr.nodes(ss, nil)
		slices.SortFunc(gotNodes, func(a, b Node) int { return int(a.ID) - int(b.ID) })
		if len(gotNodes) != len(wantNodes[k]) {
			t.Fatalf("OfKind(%q) through the long read: %d nodes, want %d", k, len(gotNodes), len(wantNodes[k]))
		}
		for i := range gotNodes {
			if !nodeEqual(gotNodes[i], wantNodes[k][i]) {
				t.Fatalf("long read node %+v, want %+v", gotNodes[i], wantNodes[k][i])
			}
		}
	}
	tr.mu.RLock()
	histLen := len(tr.s.lr.hist)
	tr.mu.RUnlock()
	if histLen == 0 {
		t.Fatal("no history was kept during the long read")
	}
	lr.end()
	if n := len(tr.s.lr.hist) + len(tr.s.lr.gone); n != 0 {
		t.Fatalf("%d history entries left after the read ended", n)
	}
	m.check(t, tr)
}

// TestOverlappingLongReads ends an older long read while a newer one is in
// progress: pruning the history must keep what the newer one needs.
func TestOverlappingLongReads(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	tr, m, step := randomApplier(t, r)
	step(300)
	want1 := saveBytes(t, tr)
	lr1 := tr.beginLong()
	step(200)
	want2 := saveBytes(t, tr)
	lr2 := tr.beginLong()
	step(200)
	var got bytes.Buffer
	if err := tr.saveFrom(lr1, &got); err != nil || !bytes.Equal(got.Bytes(), want1) {
		t.Fatalf("first long read: %v, equal %v", err, bytes.Equal(got.Bytes(), want1))
	}
	lr1.end()
	step(100)
	got.Reset()
	if err := tr.saveFrom(lr2, &got); err != nil || !bytes.Equal(got.Bytes(), want2) {
		t.Fatalf("second long read after the first ended: %v, equal %v", err, bytes.Equal(got.Bytes(), want2))
	}
	lr2.end()
	m.check(t, tr)
}

// randomApplier returns a tree, its reference model and a function that applies n random
// batches to it, each checked against a reference model.
func randomApplier(t *testing.T, r *rand.Rand) (*Tree, *model, func(n int)) {
	m := newModel()
	tr := New()
	index := uint64(0)
	return tr, m, func(n int) {
		for i := 0; i < n; i++ {
			index++
			b := randBatch(r, m)
			data, err := b.Encode()
			if err != nil {
				t.Fatal(err)
			}
			applyChecked(t, tr, m, index, b, data)
		}
	}
}
