// Package testhook carries what package catalog gives its test kit,
// catalog/catalogtest, without making it part of catalog's API: the one
// write that bypasses the log (SetAttr) and the owner index's size
// (OwnedCount), which tests of other packages check.
//
// Package catalog sets the hooks when it is initialized; nothing else
// writes them. The package owns no goroutines.
package testhook
