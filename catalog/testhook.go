package catalog

import "github.com/metatree/metatree/catalog/internal/testhook"

// The test kit's hooks (internal/testhook): what catalog/catalogtest gives
// tests of other packages and a host never needs.
func init() {
	testhook.SetAttr = func(t any, path, attr string, v any) error { return t.(*Tree).setAttrInPlace(path, attr, v.(Value)) }
	testhook.OwnedCount = func(t any) int { return t.(*Tree).ownedCount() }
}
