package catalog

// This file gives the package's tests what they inspect and no user
// needs: a node's child count and whether an index exists, each read under
// the tree's read lock as one consistent state, and the digest in a format
// of choice for the external tests.

// DigestOf is Tree.digestOf for the package's external tests.
var DigestOf = (*Tree).digestOf

// ChildCount returns the number of children of the node at path.
func (t *Tree) ChildCount(path string) int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	slot, ok := t.s.Resolve(path)
	if !ok {
		return 0
	}
	return len(t.s.KidsOf(slot))
}

// HasIndex reports whether the secondary index on (kind, attr) exists.
func (t *Tree) HasIndex(kind, attr string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	k, ok1 := t.s.kindIdx[kind]
	key, ok2 := t.s.keyIdx[attr]
	return ok1 && ok2 && t.s.indexes[[2]uint32{k, key}] != nil
}
