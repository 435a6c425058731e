package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func insertOK(t *testing.T, p *kidPool, h uint32, pos int, slot uint32) uint32 {
	t.Helper()
	h, err := p.insert(h, pos, slot, kidForward)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

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
			handles[l] = insertOK(t, &p, handles[l], len(ref[l]), uint32(i))
			ref[l] = append(ref[l], uint32(i))
			continue
		}
		if len(ref[l]) > 0 && r.IntN(2) == 0 {
			pos := r.IntN(len(ref[l]))
			handles[l] = p.remove(handles[l], pos)
			ref[l] = slices.Delete(ref[l], pos, pos+1)
		} else {
			pos := r.IntN(len(ref[l]) + 1)
			handles[l] = insertOK(t, &p, handles[l], pos, uint32(i))
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
		h = insertOK(t, &p, h, i, uint32(i))
	}
	h = insertOK(t, &p, h, 0, 7)
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

// A list too big for the size classes gets a chunk of its own; releasing it
// frees the chunk's index for the next one. Handles have room for
// kidMaxChunks chunk indexes, so without reuse the handle of the
// kidMaxChunks-th huge list wraps to 0 ("no list").
func TestKidPoolReusesChunksOfReleasedHugeLists(t *testing.T) {
	var p kidPool
	small := insertOK(t, &p, 0, 0, 42)
	huge := kidClasses[len(kidClasses)-1] + 1
	for i := range kidMaxChunks + 1 {
		h, ok := p.alloc(huge, kidForward)
		if !ok || h == 0 {
			t.Fatalf("huge list %d: handle %d, ok %v", i, h, ok)
		}
		r := p.region(h)
		r[2], r[0] = uint32(i), 1
		if l := p.list(h); len(l) != 1 || l[0] != uint32(i) {
			t.Fatalf("huge list %d reads %v", i, l)
		}
		p.release(h)
	}
	if got := p.list(small); !slices.Equal(got, []uint32{42}) {
		t.Fatalf("small list reads %v, want [42]", got)
	}
	if len(p.chunks) > 2 {
		t.Fatalf("%d chunks for one small list and one huge one at a time", len(p.chunks))
	}
}

// An insert that needs a chunk when none is left fails with ErrCapacity and
// leaves the list as it was; the chunks kept in reserve still serve
// rollbacks, and a released chunk serves the next insert.
func TestKidPoolRefusesOverflow(t *testing.T) {
	p := kidPool{maxChunks: 4} // two for batches, two in reserve
	var h uint32
	var ref []uint32
	for i := uint32(0); ; i++ {
		nh, err := p.insert(h, len(ref), i, kidForward)
		if err != nil {
			if !errors.Is(err, ErrCapacity) {
				t.Fatalf("insert %d: %v, want ErrCapacity", i, err)
			}
			if nh != h {
				t.Fatalf("a failed insert changed the handle from %d to %d", h, nh)
			}
			break
		}
		h, ref = nh, append(ref, i)
		if len(p.chunks) > 2 {
			t.Fatalf("batches took chunk %d of the reserve", len(p.chunks))
		}
	}
	if got := p.list(h); !slices.Equal(got, ref) {
		t.Fatalf("after the refusal the list has %d entries, want %d", len(got), len(ref))
	}
	next := uint32(len(ref))
	h, err := p.insert(h, len(ref), next, kidRollback)
	if err != nil {
		t.Fatalf("rollback insert: %v", err)
	}
	ref = append(ref, next)
	if got := p.list(h); !slices.Equal(got, ref) {
		t.Fatalf("after the rollback insert the list has %d entries, want %d", len(got), len(ref))
	}
}

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
	p := &tr.s.kids
	p.maxChunks = 2 * len(p.chunks)
	c := p.chunks[p.cur]
	free := c[len(c):cap(c)]
	p.chunks[p.cur] = c[:cap(c)]

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

	clear(free)
	p.chunks[p.cur] = c
	mustApply(t, tr, tr.Index()+1, Batch{Ops: []Op{{Type: OpMove, Path: "/a/x", To: "/b/x"}, {Type: OpCreate, Path: "/b/z", Kind: "k"}}})
	if got := tr.Children("/b"); !slices.Equal(got, []string{"x", "z"}) {
		t.Fatalf("/b has %v, want [x z]", got)
	}
}
