package lint

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestEveryPackageHasADocGo checks that every directory holding a
// package's non-test source (the examples, the commands and the nested
// modules included) keeps its package comment in a doc.go, where a reader
// looks for the package's contract first. Directories of tests alone
// (examples/e2e) and testdata are exempt.
func TestEveryPackageHasADocGo(t *testing.T) {
	root := moduleRoot(t)
	source := map[string]bool{} // dir -> has doc.go
	for _, f := range goFiles(t, root) {
		if strings.HasSuffix(f, "_test.go") || slices.Contains(strings.Split(filepath.ToSlash(f), "/"), "testdata") {
			continue
		}
		dir := filepath.Dir(f)
		source[dir] = source[dir] || filepath.Base(f) == "doc.go"
	}
	if len(source) < 10 {
		t.Fatalf("found %d package directories: the walk is wrong", len(source))
	}
	for dir, has := range source {
		if !has {
			t.Errorf("%s: a package without a doc.go", dir)
		}
	}
}
