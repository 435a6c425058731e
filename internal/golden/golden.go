package golden

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata from what the tests encode")

// Check compares got with the golden file at path (relative to the test's
// package directory) and fails t if they differ; with -update it writes
// got to path instead.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("golden: %v", err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("golden: %v", err)
		}
		return
	}
	want := Read(t, path)
	if !bytes.Equal(got, want) {
		t.Fatalf("golden: the encoding differs from %s (a format change needs a new format version, and a new file beside the old one; -update rewrites it)\ngot:\n%s\nwant:\n%s",
			path, hex.Dump(got), hex.Dump(want))
	}
}

// Read returns the golden file at path, failing t if it cannot be read.
func Read(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden: %v (run the test with -update to write it)", err)
	}
	return b
}
