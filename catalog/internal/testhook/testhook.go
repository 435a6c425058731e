package testhook

// SetAttr sets attribute attr of the node at path to v (a catalog.Value)
// in place on tree (a *catalog.Tree), outside any batch.
var SetAttr func(tree any, path, attr string, v any) error

// OwnedCount returns how many nodes of tree (a *catalog.Tree) are owned.
var OwnedCount func(tree any) int
