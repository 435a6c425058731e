package catalogtest

import (
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/catalog/internal/testhook"
)

// SetAttr sets attribute attr of the node at path to v in place, outside
// any batch: the tree's index and the node's modified index stay as they
// are, no watcher hears of it, and the digest follows the new content, as
// it would on a replica whose applier decided differently. A path that
// does not exist is catalog.ErrNotFound, a bad path or attribute name
// catalog.ErrInvalidName, a bad value catalog.ErrInvalid.
func SetAttr(t *catalog.Tree, path, attr string, v catalog.Value) error {
	return testhook.SetAttr(t, path, attr, v)
}

// OwnedCount returns how many nodes of t are owned: the size of its owner
// index, read under the tree's read lock.
func OwnedCount(t *catalog.Tree) int {
	return testhook.OwnedCount(t)
}
