package slotmap

// Set is an ordered set of slots. The zero value is an empty set.
type Set struct{ c chunks[uint32] }

// Len returns the number of slots in the set.
func (s *Set) Len() int { return s.c.n }

// Add adds slot and reports whether it was absent.
func (s *Set) Add(slot uint32) bool { return s.c.put(slot) }

// Remove removes slot and reports whether it was present.
func (s *Set) Remove(slot uint32) bool {
	_, ok := s.c.remove(slot)
	return ok
}

// Contains reports whether slot is in the set.
func (s *Set) Contains(slot uint32) bool {
	_, ok := s.c.get(slot)
	return ok
}

// Bytes returns the heap the set takes.
func (s *Set) Bytes() int { return s.c.bytes() }

// Each calls fn with every slot in increasing order; fn must not change
// the set.
func (s *Set) Each(fn func(slot uint32)) { s.c.each(fn) }

// Map is an ordered map from slots to uint32 values. The zero value is an
// empty map.
type Map struct{ c chunks[uint64] }

// Len returns the number of slots in the map.
func (m *Map) Len() int { return m.c.n }

// Put maps slot to v and reports whether slot was absent.
func (m *Map) Put(slot, v uint32) bool { return m.c.put(uint64(slot)<<32 | uint64(v)) }

// Get returns the value of slot.
func (m *Map) Get(slot uint32) (uint32, bool) {
	e, ok := m.c.get(slot)
	return uint32(e), ok
}

// Remove removes slot and returns its value.
func (m *Map) Remove(slot uint32) (uint32, bool) {
	e, ok := m.c.remove(slot)
	return uint32(e), ok
}

// Bytes returns the heap the map takes.
func (m *Map) Bytes() int { return m.c.bytes() }

// Each calls fn with every slot and its value in increasing slot order;
// fn must not change the map.
func (m *Map) Each(fn func(slot, v uint32)) {
	m.c.each(func(e uint64) { fn(uint32(e>>32), uint32(e)) })
}
