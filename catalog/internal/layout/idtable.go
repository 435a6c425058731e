package layout

// The id table maps a node's id to its slot. Ids come from a counter, so
// the ids a tree holds are mostly dense, but deletes can leave any gaps:
// a tree that created and deleted a billion nodes holds its few live ones
// far apart, and an image says so in a few bytes. The table is a radix:
// a fixed top level of 256 entries, each over 2^32 ids, then 1,024 dirs
// of 2^22 ids, each of 1,024 pages of 4,096 ids; a level exists only
// while it leads to an id in use. So what the table costs follows the
// nodes (at most three small objects and a page for one node, usually a
// page per 4,096 nodes), never the size of the ids: a loaded image
// allocates in proportion to its records.

const (
	pageBits   = 12            // ids in a page
	IDPageSize = 1 << pageBits // ids in a page of the table
	dirBits    = 10            // pages in a dir
	dirSize    = 1 << dirBits
	midBits    = 10 // dirs in a mid
	midSize    = 1 << midBits
	topBits    = 8 // mids in the table

	// IDLimit bounds the ids: a tree hands out ids below it, and an image
	// whose next id is above it is corrupt.
	IDLimit = 1 << (pageBits + dirBits + midBits + topBits)

	dirShift = pageBits
	midShift = pageBits + dirBits
	topShift = pageBits + dirBits + midBits
)

type idTable struct {
	top [1 << topBits]*idMid
}

type idMid struct {
	dirs [midSize]*idDir
	live int // dirs in use
}

// idDir is 1,024 pages and their hints (idhint.go).
type idDir struct {
	pages [dirSize]*idPage
	hints [dirSize]idHint
	live  int // pages in use
}

type idPage struct {
	slot [IDPageSize]uint32 // slot+1; 0: no such id
	live int
}

// DirOf returns the dir of id and the index of id's page in it; nil if no
// id of that dir is in use.
func (s *Store) DirOf(id uint64) (*idDir, uint64) {
	if id >= IDLimit {
		return nil, 0
	}
	m := s.ids.top[id>>topShift]
	if m == nil {
		return nil, 0
	}
	return m.dirs[id>>midShift&(midSize-1)], id >> dirShift & (dirSize - 1)
}

// SlotOf returns the slot of id through the table.
func (s *Store) SlotOf(id uint64) (uint32, bool) {
	d, p := s.DirOf(id)
	if d == nil || d.pages[p] == nil {
		return 0, false
	}
	v := d.pages[p].slot[id&(IDPageSize-1)]
	return v - 1, v != 0
}

// SetSlotOf places id (below IDLimit: create and Load check) at slot.
func (s *Store) SetSlotOf(id uint64, slot uint32) {
	m := s.ids.top[id>>topShift]
	if m == nil {
		m = new(idMid)
		s.ids.top[id>>topShift] = m
	}
	d := m.dirs[id>>midShift&(midSize-1)]
	if d == nil {
		d = new(idDir)
		m.dirs[id>>midShift&(midSize-1)] = d
		m.live++
	}
	p := id >> dirShift & (dirSize - 1)
	pg := d.pages[p]
	if pg == nil {
		pg = new(idPage)
		d.pages[p] = pg
		d.live++
	}
	d.hintPlaced(p, id, slot, pg.live == 0)
	pg.slot[id&(IDPageSize-1)] = slot + 1
	pg.live++
}

// ClearSlotOf removes id (which is in the table), freeing the levels it
// empties.
func (s *Store) ClearSlotOf(id uint64) {
	m := s.ids.top[id>>topShift]
	d := m.dirs[id>>midShift&(midSize-1)]
	p := id >> dirShift & (dirSize - 1)
	pg := d.pages[p]
	pg.slot[id&(IDPageSize-1)] = 0
	if pg.live--; pg.live > 0 {
		return
	}
	d.pages[p] = nil
	d.hints[p] = 0
	if d.live--; d.live > 0 {
		return
	}
	m.dirs[id>>midShift&(midSize-1)] = nil
	if m.live--; m.live > 0 {
		return
	}
	s.ids.top[id>>topShift] = nil
}

// PageFrom returns the first id at or after id whose page is in use, or
// IDLimit if there is none: the walk over the ids (Save) skips the empty
// ranges between with it.
func (s *Store) PageFrom(id uint64) uint64 {
	for id < IDLimit {
		m := s.ids.top[id>>topShift]
		if m == nil {
			id = (id>>topShift + 1) << topShift
			continue
		}
		d := m.dirs[id>>midShift&(midSize-1)]
		if d == nil {
			id = (id>>midShift + 1) << midShift
			continue
		}
		if d.pages[id>>dirShift&(dirSize-1)] == nil {
			id = (id>>dirShift + 1) << dirShift
			continue
		}
		return id
	}
	return IDLimit
}
