package idset

import "sort"

// chunkCap is the capacity of chunks created by appends; chunks that grow by
// inserts beyond twice this are split.
const chunkCap = 1024

// Set is an ordered set of ids. The zero value is an empty set.
type Set struct {
	chunks [][]uint32
	n      int
}

// Len returns the number of ids in the set.
func (s *Set) Len() int { return s.n }

// chunkFor returns the index of the chunk that holds id or would hold it.
func (s *Set) chunkFor(id uint32) int {
	i := sort.Search(len(s.chunks), func(i int) bool { return s.chunks[i][0] > id }) - 1
	if i < 0 {
		i = 0
	}
	return i
}

func search(c []uint32, id uint32) (int, bool) {
	lo, hi := 0, len(c)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if c[m] < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(c) && c[lo] == id
}

// Add inserts id and reports whether it was absent.
func (s *Set) Add(id uint32) bool {
	if len(s.chunks) == 0 {
		c := make([]uint32, 1, chunkCap)
		c[0] = id
		s.chunks = append(s.chunks, c)
		s.n++
		return true
	}
	last := len(s.chunks) - 1
	lc := s.chunks[last]
	if id > lc[len(lc)-1] { // the common case: ids grow
		if len(lc) < chunkCap {
			s.chunks[last] = append(lc, id)
		} else {
			c := make([]uint32, 1, chunkCap)
			c[0] = id
			s.chunks = append(s.chunks, c)
		}
		s.n++
		return true
	}
	ci := s.chunkFor(id)
	c := s.chunks[ci]
	pos, found := search(c, id)
	if found {
		return false
	}
	c = append(c, 0)
	copy(c[pos+1:], c[pos:])
	c[pos] = id
	if len(c) > 2*chunkCap {
		half := len(c) / 2
		right := make([]uint32, len(c)-half, chunkCap*2)
		copy(right, c[half:])
		left := make([]uint32, half, chunkCap*2)
		copy(left, c[:half])
		s.chunks = append(s.chunks, nil)
		copy(s.chunks[ci+2:], s.chunks[ci+1:])
		s.chunks[ci] = left
		s.chunks[ci+1] = right
	} else {
		s.chunks[ci] = c
	}
	s.n++
	return true
}

// Remove deletes id and reports whether it was present.
func (s *Set) Remove(id uint32) bool {
	if len(s.chunks) == 0 {
		return false
	}
	ci := s.chunkFor(id)
	c := s.chunks[ci]
	pos, found := search(c, id)
	if !found {
		return false
	}
	copy(c[pos:], c[pos+1:])
	c = c[:len(c)-1]
	if len(c) == 0 {
		copy(s.chunks[ci:], s.chunks[ci+1:])
		s.chunks[len(s.chunks)-1] = nil
		s.chunks = s.chunks[:len(s.chunks)-1]
	} else {
		s.chunks[ci] = c
	}
	s.n--
	return true
}

// Contains reports whether id is in the set.
func (s *Set) Contains(id uint32) bool {
	if len(s.chunks) == 0 {
		return false
	}
	_, found := search(s.chunks[s.chunkFor(id)], id)
	return found
}

// Range calls fn with each id in increasing order until fn returns false,
// and reports whether it saw them all. It does not allocate.
func (s *Set) Range(fn func(id uint32) bool) bool {
	for _, c := range s.chunks {
		for _, id := range c {
			if !fn(id) {
				return false
			}
		}
	}
	return true
}

// AppendTo appends the ids in increasing order to dst and returns it.
func (s *Set) AppendTo(dst []uint32) []uint32 {
	if cap(dst)-len(dst) < s.n {
		nd := make([]uint32, len(dst), len(dst)+s.n)
		copy(nd, dst)
		dst = nd
	}
	for _, c := range s.chunks {
		dst = append(dst, c...)
	}
	return dst
}
