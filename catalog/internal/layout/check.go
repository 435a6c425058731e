package layout

import "fmt"

// The checks and counts below read the layout's invariants for the
// catalog's tests, which drive a whole tree and then look inside: each
// runs in time proportional to the store and, like every read, under the
// owner's read lock.

// CheckPaths checks that the path index holds exactly the nodes linked
// below the root (each found under its parent and name, nothing else
// held) and that every bucket's overflow counts the entries that passed
// it. The index must be flushed.
func (s *Store) CheckPaths() error {
	x := &s.Paths
	live := 0
	for slot := uint32(0); slot < s.NSlots; slot++ {
		r := s.At(slot)
		if r.ID == 0 || r.ID == RootID {
			continue
		}
		live++
		if got, ok := x.find(s, x.childKey(s, r.Parent, s.Name(slot)), r.Parent, s.Name(slot)); !ok || got != slot {
			return fmt.Errorf("path index: child %q of slot %d is slot %d, %v; want %d", s.Name(slot), r.Parent, got, ok, slot)
		}
	}
	if x.n != live {
		return fmt.Errorf("path index holds %d entries, the tree %d nodes below the root", x.n, live)
	}
	m := uint64(len(x.buckets) - 1)
	want := make([]uint32, len(x.buckets))
	held := 0
	for i := range x.buckets {
		b := &x.buckets[i]
		for j, tag := range b.tags {
			if tag == 0 {
				continue
			}
			held++
			slot := b.slots[j]
			r := s.At(slot)
			if r.ID == 0 || r.ID == RootID {
				return fmt.Errorf("path index holds slot %d, which is free or the root", slot)
			}
			h := x.childKey(s, r.Parent, s.Name(slot))
			if tagOf(h) != tag {
				return fmt.Errorf("slot %d has tag %d, its hash says %d", slot, tag, tagOf(h))
			}
			for k := h & m; k != uint64(i); k = (k + 1) & m {
				want[k]++
			}
		}
	}
	if held != x.n {
		return fmt.Errorf("path index counts %d entries and holds %d", x.n, held)
	}
	for i := range x.buckets {
		if x.buckets[i].overflow != want[i] {
			return fmt.Errorf("bucket %d: overflow %d, %d entries passed it", i, x.buckets[i].overflow, want[i])
		}
	}
	return nil
}

// Buckets returns the number of buckets of the path index.
func (x *PathIndex) Buckets() int { return len(x.buckets) }

// OverflowEveryBucket adds one to every bucket's overflow, the state that
// enough churn may leave behind, in which no probe ends at a bucket
// without overflow: lookups must still end.
func (x *PathIndex) OverflowEveryBucket() {
	for i := range x.buckets {
		x.buckets[i].overflow++
	}
}

// HintedPages counts the id table's pages in use that have a hint
// (affine) and those that do not (off).
func (s *Store) HintedPages() (affine, off int) {
	for _, m := range s.ids.top {
		if m == nil {
			continue
		}
		for _, d := range m.dirs {
			if d == nil {
				continue
			}
			for p, pg := range d.pages {
				switch {
				case pg == nil:
				case d.hints[p] != 0:
					affine++
				default:
					off++
				}
			}
		}
	}
	return affine, off
}

// Exhaust leaves the pool no room for batches: the current chunk full and
// no new chunk allowed outside the reserve, so that the next list that
// grows fails with ErrCapacity. restore gives the chunk's room back; the
// chunk limit stays where Exhaust put it, at twice the chunks in use.
func (p *KidPool) Exhaust() (restore func()) {
	p.maxChunks = 2 * len(p.chunks)
	c := p.chunks[p.cur]
	free := c[len(c):cap(c)]
	p.chunks[p.cur] = c[:cap(c)]
	return func() {
		clear(free)
		p.chunks[p.cur] = c
	}
}
