package slotmap

import "unsafe"

// chunkCap is the most entries a chunk holds after an append; one that
// grows past it by an insertion in its middle is split in two.
const chunkCap = 512

// entry is a set's or a map's entry: the key in its upper 32 bits.
type entry interface{ ~uint32 | ~uint64 }

func key[E entry](e E) uint32 {
	return uint32(uint64(e) >> (8*unsafe.Sizeof(e) - 32))
}

// chunks is a sequence of entries in increasing key order, with no key
// twice, kept in sorted non-empty chunks.
type chunks[E entry] struct {
	c [][]E
	n int
}

// chunkFor returns the index of the chunk that holds k or would hold it
// (the last whose first key is at most k, or 0); -1 if there is none.
func (s *chunks[E]) chunkFor(k uint32) int {
	if len(s.c) == 0 {
		return -1
	}
	if last := len(s.c) - 1; key(s.c[last][0]) <= k {
		return last // the common case: keys grow
	}
	lo, hi := 0, len(s.c)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if key(s.c[m][0]) <= k {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return max(lo-1, 0)
}

// search returns where k is or would go in c.
func search[E entry](c []E, k uint32) (int, bool) {
	n := len(c)
	if n > 0 && key(c[n-1]) < k {
		return n, false
	}
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if key(c[m]) < k {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < n && key(c[lo]) == k
}

// find returns the chunk and the position in it of k.
func (s *chunks[E]) find(k uint32) (ci, pos int, ok bool) {
	ci = s.chunkFor(k)
	if ci < 0 {
		return 0, 0, false
	}
	pos, ok = search(s.c[ci], k)
	return ci, pos, ok
}

// get returns the entry with key k.
func (s *chunks[E]) get(k uint32) (E, bool) {
	ci, pos, ok := s.find(k)
	if !ok {
		return 0, false
	}
	return s.c[ci][pos], true
}

// put adds e, or replaces the entry with its key; it reports whether e's
// key was absent.
func (s *chunks[E]) put(e E) bool {
	k := key(e)
	ci, pos, ok := s.find(k)
	if ok {
		s.c[ci][pos] = e
		return false
	}
	s.n++
	if len(s.c) == 0 || (ci == len(s.c)-1 && pos == len(s.c[ci]) && len(s.c[ci]) >= chunkCap) {
		// A first entry, or one past a full last chunk: a new chunk.
		s.c = append(s.c, []E{e})
		return true
	}
	c := s.c[ci]
	if len(c) == cap(c) {
		// Double, to at most chunkCap as long as the chunk fits in it, so
		// that a chunk filled by appends has no spare capacity.
		nc := make([]E, len(c), min(max(2*cap(c), 4), max(chunkCap, len(c)+1)))
		copy(nc, c)
		c = nc
	}
	c = append(c, 0)
	copy(c[pos+1:], c[pos:])
	c[pos] = e
	if len(c) > chunkCap {
		half := len(c) / 2
		left := make([]E, half, chunkCap)
		copy(left, c[:half])
		right := make([]E, len(c)-half, chunkCap)
		copy(right, c[half:])
		s.c = append(s.c, nil)
		copy(s.c[ci+2:], s.c[ci+1:])
		s.c[ci], s.c[ci+1] = left, right
		return true
	}
	s.c[ci] = c
	return true
}

// remove deletes the entry with key k and returns it.
func (s *chunks[E]) remove(k uint32) (E, bool) {
	ci, pos, ok := s.find(k)
	if !ok {
		return 0, false
	}
	c := s.c[ci]
	e := c[pos]
	copy(c[pos:], c[pos+1:])
	c = c[:len(c)-1]
	s.n--
	switch {
	case len(c) == 0:
		copy(s.c[ci:], s.c[ci+1:])
		s.c[len(s.c)-1] = nil
		s.c = s.c[:len(s.c)-1]
		if len(s.c) == 0 {
			s.c = nil
		}
		return e, true
	case cap(c) >= 64 && len(c) <= cap(c)/4:
		// Mostly empty: give the memory back, keeping room to grow.
		nc := make([]E, len(c), 2*len(c))
		copy(nc, c)
		c = nc
	}
	s.c[ci] = c
	return e, true
}

// each calls fn with every entry in increasing key order.
func (s *chunks[E]) each(fn func(E)) {
	for _, c := range s.c {
		for _, e := range c {
			fn(e)
		}
	}
}

// bytes returns the heap the chunks take: their capacity and headers.
func (s *chunks[E]) bytes() int {
	var e E
	n := 24 * cap(s.c)
	for _, c := range s.c {
		n += int(unsafe.Sizeof(e)) * cap(c)
	}
	return n
}
