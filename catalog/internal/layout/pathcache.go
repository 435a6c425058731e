package layout

// PathCache remembers the slots along the last path the applier resolved,
// so that the many operations of a batch under one parent do not search
// from the root each time. Its strings view the entry bytes: it is valid
// within one Apply and reset by deletes and moves (which free slots or
// change paths).
type PathCache struct {
	// missPath was just resolved and found missing: its parent's slot and
	// the position its name would take among the parent's children.
	missPath   string
	missParent uint32
	missPos    int

	path  string
	ends  []int    // ends[i]: end of component i in path
	slots []uint32 // slots[i]: the node at path[:ends[i]]
	sums  []uint64 // sums[i]: its path's sum of path index terms
}

// Reset empties the cache: a delete or a move changed the paths it holds.
func (c *PathCache) Reset() {
	c.missPath = ""
	c.path = ""
	c.ends = c.ends[:0]
	c.slots = c.slots[:0]
	c.sums = c.sums[:0]
}

// Resolve is Store.Resolve for the applier, through the cache: each level
// the cache does not hold is one probe of the path index, except where the
// child list must be searched (see below). create says the caller creates
// the path if it is missing, so its last level's position is wanted.
func (c *PathCache) Resolve(s *Store, path string, create bool) (uint32, bool) {
	if path == "/" {
		return RootSlot, true
	}
	c.missPath = ""
	// Longest cached ancestor (or the path itself).
	n := CommonPrefix(path, c.path)
	d := -1
	for i, e := range c.ends {
		if e > n || (e < len(path) && path[e] != '/') {
			break
		}
		d = i
	}
	slot := uint32(RootSlot)
	start := 1
	if d >= 0 {
		slot = c.slots[d]
		start = c.ends[d] + 1
		c.ends = c.ends[:d+1]
		c.slots = c.slots[:d+1]
		c.sums = c.sums[:d+1]
	} else {
		c.ends = c.ends[:0]
		c.slots = c.slots[:0]
		c.sums = c.sums[:0]
	}
	c.path = path
	x := &s.Paths
	for start <= len(path) {
		end := start
		for end < len(path) && path[end] != '/' {
			end++
		}
		name := UnsafeBytes(path[start:end])
		var sum uint64
		if n := len(c.sums); n > 0 {
			sum = c.sums[n-1]
		}
		sum += x.Level(len(c.sums)+1, name)
		if (create && end == len(path)) || len(x.pending) > 0 {
			// A create needs the position its name takes among the
			// parent's children, which the child list's search finds;
			// so does a level while the batch's creates wait to be put
			// in the index (flushing for every lookup would undo their
			// batching, see PathIndex.pending).
			pos, ok := s.KidPos(slot, name)
			if !ok {
				if end == len(path) {
					c.missPath, c.missParent, c.missPos = path, slot, pos
				}
				return 0, false
			}
			slot = s.KidsOf(slot)[pos]
		} else {
			// Elsewhere one probe of the path index does: the binary
			// search costs a Rec and a name a step.
			var ok bool
			if slot, ok = x.find(s, x.Key(sum), slot, name); !ok {
				return 0, false
			}
		}
		c.ends = append(c.ends, end)
		c.slots = append(c.slots, slot)
		c.sums = append(c.sums, sum)
		start = end + 1
	}
	return slot, true
}

// ChildKey is the path index key of the child of parent named name,
// from the sums of the path last resolved when parent is its end.
func (c *PathCache) ChildKey(s *Store, parent uint32, name []byte) uint64 {
	x := &s.Paths
	if parent == RootSlot {
		return x.Key(x.Level(1, name))
	}
	if n := len(c.slots); n > 0 && c.slots[n-1] == parent {
		return x.Key(c.sums[n-1] + x.Level(n+1, name))
	}
	return x.childKey(s, parent, name)
}

// Miss reports whether path is the one Resolve last found missing and, if
// so, its parent's slot and the position its name takes among the
// parent's children.
func (c *PathCache) Miss(path string) (parent uint32, pos int, ok bool) {
	return c.missParent, c.missPos, c.missPath == path
}
