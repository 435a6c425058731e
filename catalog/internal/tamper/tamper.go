// Package tamper carries the one write that bypasses the log, setting an
// attribute in place on one replica, from package catalog to its test kit,
// catalog/catalogtest, without making it part of catalog's API.
//
// Package catalog sets SetAttr when it is initialized; nothing else writes
// it. The package owns no goroutines.
package tamper

// SetAttr sets attribute attr of the node at path to v (a catalog.Value)
// in place on tree (a *catalog.Tree), outside any batch. Package catalog
// sets it in its init.
var SetAttr func(tree any, path, attr string, v any) error
