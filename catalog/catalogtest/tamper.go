package catalogtest

import (
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/catalog/internal/tamper"
)

// SetAttr sets attribute attr of the node at path to v in place, outside
// any batch: the tree's index and the node's modified index stay as they
// are, no watcher hears of it, and the digest follows the new content, as
// it would on a replica whose applier decided differently. A path that
// does not exist is catalog.ErrNotFound, a bad path or attribute name
// catalog.ErrInvalidName, a bad value catalog.ErrInvalid.
func SetAttr(t *catalog.Tree, path, attr string, v catalog.Value) error {
	return tamper.SetAttr(t, path, attr, v)
}
