package frontend

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
)

// BenchmarkEmptyNodeDisk: the disk a bootstrapped frontend with an empty
// catalog occupies, on a real disk: the blocks its data dir's files hold,
// the emergency ballast included (target: 16 MiB).
func BenchmarkEmptyNodeDisk(b *testing.B) {
	var occupied int64
	for b.Loop() {
		cfg := Config{ID: 1, Dir: filepath.Join(b.TempDir(), "1"), Addr: freeAddr(b), Bootstrap: true, Token: "secret"}
		f, err := Start(b.Context(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		occupied = allocatedBytes(b, cfg.Dir)
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(occupied)/(1<<20), "MiB/empty-node")
}

// allocatedBytes sums the blocks the files under dir hold.
func allocatedBytes(tb testing.TB, dir string) int64 {
	tb.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		total += fi.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return total
}
