package image

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal/offline"
)

// BenchmarkBackup: `metactl backup` of the Doris image from a member over
// loopback HTTP (image.Backup: streamed, checked, fsynced, renamed),
// reporting backup-MB/s beside the disk's fsync latency.
//
//	go test ./image/ -run '^$' -bench 'Backup|RestoreNewCluster' -benchtime 3x -args -doris=full
func BenchmarkBackup(b *testing.B) {
	f := fixture(b)
	src, err := Open(Config{Dir: f.dir, State: catalog.New(), ClusterID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	srv := httptest.NewServer(src.Handler())
	defer srv.Close()
	var took, fsync time.Duration
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		fsync += fsyncP50(b, dir)
		out := filepath.Join(dir, "backup.img")
		b.StartTimer()
		start := time.Now()
		info, err := Backup(context.Background(), BackupConfig{Addr: srv.URL, Out: out})
		if err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
		if info.Size != f.size {
			b.Fatalf("backup of %d bytes, the image has %d", info.Size, f.size)
		}
	}
	n := float64(b.N)
	mb := float64(f.size) / 1e6
	b.ReportMetric(mb*n/took.Seconds(), "backup-MB/s")
	b.ReportMetric(took.Seconds()/n, "backup-s")
	b.ReportMetric(mb, "image-MB")
	b.ReportMetric(ms(fsync)/n, "fsync-p50-ms")
}

// BenchmarkRestoreNewCluster: what `metactl restore` does to the Doris
// image (Store.Rewrite under a new header, checked as it is copied, then
// offline.Seed), against what a node's own startup does with the same
// image (LoadLatest: verified, decoded into the catalog). restore/load is
// the ratio of the two.
func BenchmarkRestoreNewCluster(b *testing.B) {
	f := fixture(b)
	srcPath := filepath.Join(f.dir, "image", imageName(f.base))
	var took, load time.Duration
	for b.Loop() {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "restored")
		runtime.GC()
		b.StartTimer()
		start := time.Now()
		blob, err := offline.NewClusterMembership(nil, "", f.base, 1, "node1:1")
		if err != nil {
			b.Fatal(err)
		}
		s, err := Open(Config{Dir: dir, State: catalog.New(), ClusterID: "new"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Rewrite(context.Background(), srcPath, Header{Index: f.base, Term: 1, Membership: blob}); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if err := offline.Seed(offline.SeedConfig{Dir: dir, ID: 1, Addr: "node1:1", ClusterID: "new", Index: f.base, Term: 1, Membership: blob}); err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
		b.StopTimer()
		live := catalog.New()
		ls, err := Open(Config{Dir: dir, State: live})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		lstart := time.Now()
		if _, _, err := ls.LoadLatest(context.Background(), f.base); err != nil {
			b.Fatal(err)
		}
		load += time.Since(lstart)
		if live.Len() != f.shape.Nodes() {
			b.Fatalf("restored %d nodes, want %d", live.Len(), f.shape.Nodes())
		}
		ls.Close()
		os.RemoveAll(dir)
		b.StartTimer()
	}
	n := float64(b.N)
	mb := float64(f.size) / 1e6
	b.ReportMetric(mb*n/took.Seconds(), "restore-MB/s")
	b.ReportMetric(took.Seconds()/n, "restore-s")
	b.ReportMetric(load.Seconds()/n, "load-s")
	b.ReportMetric(took.Seconds()/load.Seconds(), "restore/load")
	b.ReportMetric(mb, "image-MB")
}
