package layout

// Finding an id's slot in one memory round. The id table (idtable.go)
// ends in a 16 KiB page for every 4,096 ids: at scale, reading it is a
// cache miss of its own before the Rec's. But ids and slots are mostly
// handed out together (a catalog that grows gets both from counters, and
// Load gives slots in the image's id order), so that on most pages every
// id sits at the same distance from its slot. Each page has a hint, that
// distance, in its dir's array of 8 bytes a page that stays in the cache:
// readers compute the slot and check the Rec there instead of reading the
// page. The first id placed in an empty page sets the distance; an id
// placed at another distance turns the page's hint off until the page
// empties. Removing an id keeps the hint: the Rec at its computed slot is
// then free or another node's, which the check tells.

// idHint is a page's hint: while it is not 0, every id of the page the
// tree holds is at slot id-hint (modulo 2^64). An id is always above its
// slot (the root, id 1, is at slot 0, and slots are reused or added below
// the id counter), so 0 is never a distance; a page whose ids were at
// distance 0 would only go without a hint.
type idHint uint64

// hintPlaced keeps the hint of page p of d as id is placed at slot; first
// says the page held no id before.
func (d *idDir) hintPlaced(p, id uint64, slot uint32, first bool) {
	switch h := idHint(id - uint64(slot)); {
	case first:
		d.hints[p] = h
	case d.hints[p] != h:
		d.hints[p] = 0
	}
}

// LookupID returns the slot of id through its page's hint when it has
// one, and through the table otherwise. Only readers of a whole state use
// it (between batches): inside a batch a slot's Rec and the table change
// at different moments.
func (s *Store) LookupID(id uint64) (uint32, bool) {
	d, p := s.DirOf(id)
	if d == nil {
		return 0, false
	}
	if h := d.hints[p]; h != 0 {
		slot := id - uint64(h)
		if slot < uint64(s.NSlots) && s.At(uint32(slot)).ID == id {
			return uint32(slot), true
		}
		return 0, false
	}
	if d.pages[p] == nil {
		return 0, false
	}
	v := d.pages[p].slot[id&(IDPageSize-1)]
	return v - 1, v != 0
}
