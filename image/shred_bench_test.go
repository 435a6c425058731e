package image

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkPruneStall: a writer appends 256 bytes and fdatasyncs, the
// shape of the journal's WAL commit, in a loop on the same disk, while
// Prune removes an old image of the Doris catalog's size (132 MB), shredded
// at the default pace (paced=true) or removed at once (paced=false).
// Reports the writer's worst and p99 fdatasync while the image goes (until
// 200 ms after it is gone) beside its p99 in the second before. On a
// filesystem that discards freed blocks (this machine's ext4 is mounted
// with -o discard) removing it at once stalls the writer.
func BenchmarkPruneStall(b *testing.B) {
	for _, paced := range []bool{true, false} {
		b.Run(fmt.Sprintf("paced=%v", paced), func(b *testing.B) { benchPruneStall(b, paced) })
	}
}

const pruneStallImageBytes = 132 << 20

func benchPruneStall(b *testing.B, paced bool) {
	var worst, during, before, took time.Duration
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		rate := int64(-1)
		if paced {
			rate = 0 // the default
		}
		gone := make(chan struct{})
		s, err := Open(Config{Dir: dir, State: newKV(), Keep: 1, DeleteBytesPerSec: rate,
			testingKnobs: testingKnobs{shredded: func(_ string, size int64) {
				if size == -1 {
					close(gone)
				}
			}}})
		if err != nil {
			b.Fatal(err)
		}
		img := filepath.Join(dir, imageDirName)
		writeJunk(b, filepath.Join(img, "image.1"), pruneStallImageBytes)
		writeJunk(b, filepath.Join(img, "image.2"), 4096)

		w := startSyncWriter(b, dir)
		time.Sleep(time.Second) // the writer's baseline
		mark := w.mark()
		start := time.Now()
		b.StartTimer()
		if err := s.Prune(); err != nil {
			b.Fatal(err)
		}
		if paced {
			<-gone
		}
		b.StopTimer()
		took += time.Since(start)
		time.Sleep(200 * time.Millisecond) // the trims land after the removal
		lat := w.stop()
		base, window := slices.Clone(lat[:mark]), slices.Clone(lat[mark:])
		slices.Sort(window)
		worst += window[len(window)-1]
		during += p99(window)
		before += p99(base[len(base)/2:]) // the last half second before
		if _, err := os.Stat(filepath.Join(img, "image.1")); !os.IsNotExist(err) {
			b.Fatalf("image.1 still there: %v", err)
		}
		s.Close()
		b.StartTimer()
	}
	n := time.Duration(b.N)
	b.ReportMetric(ms(worst/n), "write-max-ms")
	b.ReportMetric(ms(during/n), "write-p99-ms")
	b.ReportMetric(ms(before/n), "baseline-p99-ms")
	b.ReportMetric((took / n).Seconds(), "remove-s")
}

// ms is d in milliseconds, for b.ReportMetric.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// writeJunk writes size random bytes to path and syncs them.
func writeJunk(b *testing.B, path string, size int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	rand.Read(buf)
	for size > 0 {
		n := min(size, len(buf))
		if _, err := f.Write(buf[:n]); err != nil {
			b.Fatal(err)
		}
		size -= n
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// syncWriter appends 256 bytes and fdatasyncs in a loop, recording each
// latency.
type syncWriter struct {
	f    vfs.File
	mu   sync.Mutex
	lat  []time.Duration
	stop func() []time.Duration
}

func startSyncWriter(b *testing.B, dir string) *syncWriter {
	f, err := vfs.Default.Create(filepath.Join(dir, "wal"), vfs.WriteCategoryUnspecified)
	if err != nil {
		b.Fatal(err)
	}
	w := &syncWriter{f: f}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 256)
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := f.Write(buf); err != nil {
				b.Error(err)
				return
			}
			t0 := time.Now()
			if err := f.SyncData(); err != nil {
				b.Error(err)
				return
			}
			d := time.Since(t0)
			w.mu.Lock()
			w.lat = append(w.lat, d)
			w.mu.Unlock()
		}
	})
	w.stop = func() []time.Duration {
		close(done)
		wg.Wait()
		f.Close()
		return w.lat
	}
	return w
}

// mark returns how many latencies are recorded so far.
func (w *syncWriter) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.lat)
}
