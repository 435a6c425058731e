package layout

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func insertOK(t *testing.T, p *KidPool, h uint32, pos int, slot uint32) uint32 {
	t.Helper()
	h, err := p.Insert(h, pos, slot, KidForward)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestKidPoolAgainstSlices(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	var p KidPool
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
			handles[l] = p.Remove(handles[l], pos)
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
		if got := p.List(handles[l]); !slices.Equal(got, ref[l]) {
			t.Fatalf("list %d: %d entries, want %d", l, len(got), len(ref[l]))
		}
	}
	if len(ref[0]) <= int(kidClasses[len(kidClasses)-1])/20 && len(ref[0]) < 40000 {
		t.Logf("big list has %d entries", len(ref[0]))
	}
}

func TestKidPoolHugeList(t *testing.T) {
	var p KidPool
	var h uint32
	const n = 900000 // beyond the largest class
	for i := 0; i < n; i++ {
		h = insertOK(t, &p, h, i, uint32(i))
	}
	h = insertOK(t, &p, h, 0, 7)
	l := p.List(h)
	if len(l) != n+1 || l[0] != 7 {
		t.Fatalf("huge list: len %d, head %d", len(l), l[0])
	}
	for i, v := range l[1:] { // every slot survived the moves out of the classes
		if v != uint32(i) {
			t.Fatalf("huge list: l[%d] = %d, want %d", i+1, v, i)
		}
	}
	h = p.Remove(h, 0)
	for i := n - 1; i >= 0; i-- {
		h = p.Remove(h, i)
	}
	if h != 0 {
		t.Fatalf("emptied list has handle %d", h)
	}
}

func TestKidPoolReusesChunksOfReleasedHugeLists(t *testing.T) {
	var p KidPool
	small := insertOK(t, &p, 0, 0, 42)
	huge := kidClasses[len(kidClasses)-1] + 1
	for i := range kidMaxChunks + 1 {
		h, ok := p.alloc(huge, KidForward)
		if !ok || h == 0 {
			t.Fatalf("huge list %d: handle %d, ok %v", i, h, ok)
		}
		r := p.Region(h)
		r[2], r[0] = uint32(i), 1
		if l := p.List(h); len(l) != 1 || l[0] != uint32(i) {
			t.Fatalf("huge list %d reads %v", i, l)
		}
		p.release(h)
	}
	if got := p.List(small); !slices.Equal(got, []uint32{42}) {
		t.Fatalf("small list reads %v, want [42]", got)
	}
	if len(p.chunks) > 2 {
		t.Fatalf("%d chunks for one small list and one huge one at a time", len(p.chunks))
	}
}

func TestKidPoolRefusesOverflow(t *testing.T) {
	p := KidPool{maxChunks: 4} // two for batches, two in reserve
	var h uint32
	var ref []uint32
	for i := uint32(0); ; i++ {
		nh, err := p.Insert(h, len(ref), i, KidForward)
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
	if got := p.List(h); !slices.Equal(got, ref) {
		t.Fatalf("after the refusal the list has %d entries, want %d", len(got), len(ref))
	}
	next := uint32(len(ref))
	h, err := p.Insert(h, len(ref), next, KidRollback)
	if err != nil {
		t.Fatalf("rollback insert: %v", err)
	}
	ref = append(ref, next)
	if got := p.List(h); !slices.Equal(got, ref) {
		t.Fatalf("after the rollback insert the list has %d entries, want %d", len(got), len(ref))
	}
}
