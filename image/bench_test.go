package image

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/internal/benchshape"
	"github.com/metatree/metatree/journal"
)

// The benchmarks run on a Doris-like catalog (databases, tables,
// partitions, tablets, replicas indexed by worker) and 100,000 journal
// entries after its image, each a replica version update. The full size
// holds the 3,000,000 replicas Doris cites for 2 GB of FE heap (4,012,551
// nodes with their tablets, partitions, tables and databases); the default
// is 1/50 of it so that `go test -bench .` stays quick:
//
//	go test ./image/ -run '^$' -bench 'Checkpoint|Restore|Startup' -benchtime 1x -args -doris=full
var dorisScale = flag.String("doris", "small", "catalog size for the benchmarks: small (80,256 nodes) or full (4,012,551 nodes)")

func shapeFor(scale string) benchshape.Doris {
	if scale == "full" {
		return benchshape.Full
	}
	return benchshape.Small
}

// buildDoris applies the shape to tr in batches of 100 operations from
// index 1 and returns the last index.
func buildDoris(tb testing.TB, d benchshape.Doris, tr *catalog.Tree) uint64 {
	var index uint64
	dorisBatches(tb, d, func(_ int, data []byte) {
		index++
		if res := tr.Apply(index, data).(*catalog.Result); res.Err != nil {
			tb.Fatalf("batch %d: %v", index, res.Err)
		}
	})
	return index
}

// dorisBatches hands the shape to emit as encoded batches of up to 100
// operations, each within one database (db -1: the index definition that
// comes first), in an order that creates every parent before its children.
func dorisBatches(tb testing.TB, d benchshape.Doris, emit func(db int, data []byte)) {
	var ops []catalog.Op
	curDB := -1
	flush := func() {
		if len(ops) == 0 {
			return
		}
		data, err := catalog.Batch{Ops: ops}.Encode()
		if err != nil {
			tb.Fatal(err)
		}
		emit(curDB, data)
		ops = ops[:0]
	}
	add := func(op catalog.Op) {
		ops = append(ops, op)
		if len(ops) >= 100 {
			flush()
		}
	}
	add(catalog.Op{Type: catalog.OpCreateIndex, Kind: "replica", Attr: "worker"})
	flush()
	d.Walk(func(n benchshape.Node) {
		op := catalog.Op{Type: catalog.OpCreate, Path: n.Path, Kind: n.Kind}
		switch n.Kind {
		case "database":
			flush()
			curDB = n.DB
		case "table":
			op.Set = map[string]catalog.Value{"engine": catalog.String("olap")}
		case "replica":
			r := n.Replica
			op.Set = map[string]catalog.Value{
				"worker":  catalog.Int(r.Worker),
				"version": catalog.Int(r.Version),
				"state":   catalog.String(r.State),
				"size":    catalog.Int(r.Size),
			}
		}
		add(op)
	})
	flush()
}

// dorisUpdates returns n encoded batches, each a version bump of one
// random replica (what a tablet report or a publish journals).
func dorisUpdates(tb testing.TB, d benchshape.Doris, n int, seed uint64) [][]byte {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([][]byte, n)
	for i := range out {
		data, err := catalog.Batch{Ops: []catalog.Op{{
			Type: catalog.OpUpdate, Path: d.ReplicaPath(1+r.IntN(d.TabletTotal()), r.IntN(d.Replicas)),
			Set: map[string]catalog.Value{"version": catalog.Int(int64(1000 + i))},
		}}}.Encode()
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = data
	}
	return out
}

const benchEntries = 100_000

// dorisFixture is a data dir on the real disk holding the image of the
// Doris catalog, and the 100,000 entries that follow it.
type dorisFixture struct {
	shape   benchshape.Doris
	dir     string // data dir; its image/ holds image.<base>
	base    uint64
	entries [][]byte // indexes base+1 ...
	size    int64    // image bytes
}

var (
	fixturesMu sync.Mutex
	fixtures   = map[string]*dorisFixture{}
)

func cleanupBenchFixtures() {
	fixturesMu.Lock()
	defer fixturesMu.Unlock()
	for _, f := range fixtures {
		os.RemoveAll(f.dir)
	}
	for _, f := range journalFixtures {
		os.RemoveAll(f.dir)
	}
}

// openLive copies the fixture's data dir and opens it as a live node would
// be: the image loaded, then the entries after it applied.
func (f *dorisFixture) openLive(b *testing.B) (string, *catalog.Tree, *Store, *benchJournal) {
	b.Helper()
	dir := copyDir(b, f.dir)
	live := catalog.New()
	s, err := Open(Config{Dir: dir, State: live, ClusterID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := s.LoadLatest(context.Background(), f.base); err != nil {
		b.Fatal(err)
	}
	j := &benchJournal{base: f.base}
	for _, e := range f.entries {
		live.Apply(j.add(e), e)
	}
	return dir, live, s, j
}

func fixture(b *testing.B) *dorisFixture {
	b.Helper()
	fixturesMu.Lock()
	defer fixturesMu.Unlock()
	if f := fixtures[*dorisScale]; f != nil {
		return f
	}
	b.StopTimer()
	defer b.StartTimer()
	shape := shapeFor(*dorisScale)
	dir, err := os.MkdirTemp("", "image-bench-")
	if err != nil {
		b.Fatal(err)
	}
	tr := catalog.New()
	base := buildDoris(b, shape, tr)
	if tr.Len() != shape.Nodes() {
		b.Fatalf("catalog has %d nodes, want %d", tr.Len(), shape.Nodes())
	}
	s, err := Open(Config{Dir: dir, State: tr, ClusterID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	info, err := s.Write(context.Background(), Header{Index: base, Term: 1, Membership: []byte("voters=1,2,3")}, tr.Save)
	if err != nil {
		b.Fatal(err)
	}
	s.Close()
	f := &dorisFixture{shape: shape, dir: dir, base: base, entries: dorisUpdates(b, shape, benchEntries, 1), size: info.Size}
	fixtures[*dorisScale] = f
	return f
}

// benchJournal serves the fixture's entries (and those appended by the
// benchmark's writer) like the journal would.
type benchJournal struct {
	mu      sync.Mutex
	base    uint64
	entries [][]byte
}

func (j *benchJournal) applied() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.base + uint64(len(j.entries))
}

func (j *benchJournal) add(d []byte) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, d)
	return j.base + uint64(len(j.entries))
}

func (j *benchJournal) ReadEntries(ctx context.Context, after, upTo uint64, fn func(uint64, []byte) error) error {
	j.mu.Lock()
	ents := j.entries[after-j.base : upTo-j.base]
	j.mu.Unlock()
	for k, e := range ents {
		if k%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if err := fn(after+1+uint64(k), e); err != nil {
			return err
		}
	}
	return nil
}

func (j *benchJournal) MembershipAt(uint64) ([]byte, error) { return []byte("voters=1,2,3"), nil }
func (j *benchJournal) TermAt(uint64) (uint64, error)       { return 1, nil }
func (j *benchJournal) ImageWritten(context.Context, uint64, uint64, []byte) error {
	return nil
}

// FirstIndex: the benchmark's log is never compacted.
func (j *benchJournal) FirstIndex() (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.base + 1, nil
}

// copyDir copies the fixture's data dir (the images) to a fresh one.
func copyDir(b *testing.B, from string) string {
	to := b.TempDir()
	if err := os.MkdirAll(filepath.Join(to, imageDirName), 0o755); err != nil {
		b.Fatal(err)
	}
	names, _ := os.ReadDir(filepath.Join(from, imageDirName))
	for _, n := range names {
		if !strings.HasPrefix(n.Name(), imagePrefix) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, imageDirName, n.Name()))
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, imageDirName, n.Name()), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return to
}

var (
	heapObjects = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heapLive    = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
)

// markedLive is the heap the last GC found live (garbage excluded).
func markedLive() uint64 {
	metrics.Read(heapLive)
	return heapLive[0].Value.Uint64()
}

func heapNow() uint64 {
	metrics.Read(heapObjects)
	return heapObjects[0].Value.Uint64()
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	return heapNow()
}

// peakSampler records the highest heap (live objects and not yet collected
// garbage) seen while it runs, and the highest heap a GC found live.
type peakSampler struct {
	peak     atomic.Uint64
	peakLive atomic.Uint64
	stop     chan struct{}
	done     chan struct{}
}

func startPeakSampler() *peakSampler {
	p := &peakSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if h := heapNow(); h > p.peak.Load() {
				p.peak.Store(h)
			}
			if h := markedLive(); h > p.peakLive.Load() {
				p.peakLive.Store(h)
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peakSampler) finish() uint64 {
	close(p.stop)
	<-p.done
	return p.peak.Load()
}

// fsyncP50 measures the disk's fsync latency (4 KiB write + fsync) in dir.
func fsyncP50(b *testing.B, dir string) time.Duration {
	f, err := os.Create(filepath.Join(dir, "fsync-probe"))
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	var lat []time.Duration
	for range 200 {
		start := time.Now()
		f.Write(buf)
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	return lat[len(lat)/2]
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[len(lat)*99/100]
}

// writer applies one version update to the live catalog every interval
// (through the journal, as the apply loop would) and records how long each
// apply took.
type writer struct {
	mu   sync.Mutex
	lat  []time.Duration
	stop chan struct{}
	done chan struct{}
}

func startWriter(live *catalog.Tree, j *benchJournal, updates [][]byte, every time.Duration) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			d := updates[i%len(updates)]
			start := time.Now()
			idx := j.add(d)
			live.Apply(idx, d)
			el := time.Since(start)
			w.mu.Lock()
			w.lat = append(w.lat, el)
			w.mu.Unlock()
		}
	}()
	return w
}

// take returns the latencies recorded so far and starts a new window.
func (w *writer) take() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.lat
	w.lat = nil
	return l
}

func (w *writer) finish() {
	close(w.stop)
	<-w.done
}

// phaseLog notes the heap when the checkpointer logs the end of a phase.
type phaseLog struct {
	mu    sync.Mutex
	lines []string
}

func (p *phaseLog) Enabled(context.Context, slog.Level) bool { return true }
func (p *phaseLog) WithAttrs([]slog.Attr) slog.Handler       { return p }
func (p *phaseLog) WithGroup(string) slog.Handler            { return p }
func (p *phaseLog) Handle(_ context.Context, r slog.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	took := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "took" {
			took = a.Value.String()
		}
		return true
	})
	p.lines = append(p.lines, fmt.Sprintf("%s (%s): heap %d MB", r.Message, took, heapNow()>>20))
	return nil
}

func (p *phaseLog) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "; ")
}

// BenchmarkCheckpoint: a shadow-replay checkpoint of the Doris catalog plus
// 100,000 entries after its image, on the real disk with fsync, while a
// writer keeps applying to the live catalog.
//
//	checkpoint-s     time for the checkpoint (load base, replay, write, fsync)
//	peak-heap-ratio  peak heap during the checkpoint / heap with the live catalog
//	                 (sampled heap objects, including garbage not yet collected
//	                 at GOGC=100)
//	peak-live-ratio  the same for the heap each GC found live during the
//	                 checkpoint (what the checkpoint needs; what a
//	                 GOMEMLIMIT must leave room for)
//	write-p99-ratio  p99 apply latency during the checkpoint / p99 without one
func BenchmarkCheckpoint(b *testing.B) {
	f := fixture(b)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		dir, live, s, j := f.openLive(b)
		phases := &phaseLog{}
		cp, err := NewCheckpointer(CheckpointerConfig{
			Store: s, Journal: j, Applied: j.applied,
			NewState: func() State { return catalog.New() }, Interval: time.Hour,
			Logger: slog.New(phases),
		})
		if err != nil {
			b.Fatal(err)
		}
		fsync := fsyncP50(b, dir)
		heap := liveHeap()

		// The same writer runs through a window without a checkpoint, then
		// through the checkpoint.
		w := startWriter(live, j, dorisUpdates(b, f.shape, 10_000, 2), time.Millisecond)
		time.Sleep(3 * time.Second)
		base := w.take()
		ps := startPeakSampler()
		b.StartTimer()
		start := time.Now()
		info, err := cp.Checkpoint(context.Background())
		took := time.Since(start)
		b.StopTimer()
		peak := ps.finish()
		if testing.Verbose() {
			b.Logf("heap at phase ends (live %d MB): %s", heap>>20, phases)
		}
		during := w.take()
		w.finish()
		if err != nil {
			b.Fatal(err)
		}
		if info.Index < f.base+benchEntries {
			b.Fatalf("checkpoint at %d, want at least %d", info.Index, f.base+benchEntries)
		}
		cp.Close()
		s.Close()
		b.ReportMetric(took.Seconds(), "checkpoint-s")
		b.ReportMetric(float64(peak)/float64(heap), "peak-heap-ratio")
		b.ReportMetric(float64(ps.peakLive.Load())/float64(heap), "peak-live-ratio")
		b.ReportMetric(float64(p99(during))/float64(p99(base)), "write-p99-ratio")
		b.ReportMetric(float64(p99(base).Microseconds()), "write-p99-base-µs")
		b.ReportMetric(float64(info.Size)/1e6, "image-MB")
		b.ReportMetric(float64(heap)/1e6, "live-heap-MB")
		b.ReportMetric(ms(fsync), "fsync-p50-ms")
		b.StartTimer()
	}
}

// BenchmarkAdopt: the leader's alternative to BenchmarkCheckpoint. With the
// same live catalog, entries and writer, a Checkpointer that may not
// checkpoint by shadow replay adopts a peer's image of the same index over
// loopback HTTP (fetched, verified, fsynced, renamed, never loaded).
//
//	adopt-s          time for the adoption (ask the peer, download, fsync)
//	peak-heap-ratio  as in BenchmarkCheckpoint: what the leader is spared
//	peak-live-ratio  as in BenchmarkCheckpoint
//	write-p99-ratio  p99 apply latency during the adoption / p99 without one
func BenchmarkAdopt(b *testing.B) {
	f := fixture(b)
	// The peer: the fixture plus the entries, checkpointed by shadow replay.
	peerDir := copyDir(b, f.dir)
	peer, err := Open(Config{Dir: peerDir, State: catalog.New(), ClusterID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer peer.Close()
	pj := &benchJournal{base: f.base}
	for _, e := range f.entries {
		pj.add(e)
	}
	pcp, err := NewCheckpointer(CheckpointerConfig{
		Store: peer, Journal: pj, Applied: pj.applied,
		NewState: func() State { return catalog.New() }, Interval: time.Hour,
	})
	if err != nil {
		b.Fatal(err)
	}
	want, err := pcp.Checkpoint(context.Background())
	pcp.Close()
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(peer.Handler())
	defer srv.Close()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		dir, live, s, j := f.openLive(b)
		clock := newFakeClock()
		ticks := make(chan tickResult, 1)
		cfg := CheckpointerConfig{
			Store: s, Journal: j, Applied: j.applied,
			NewState:  func() State { return catalog.New() },
			Enabled:   func() bool { return false },
			Peers:     func() []string { return []string{srv.URL} },
			Threshold: benchEntries, Clock: clock,
		}
		cfg.testingKnobs.afterTick = func(_ bool, info Info, err error) { ticks <- tickResult{true, info, err} }
		cp, err := NewCheckpointer(cfg)
		if err != nil {
			b.Fatal(err)
		}
		fsync := fsyncP50(b, dir)
		heap := liveHeap()

		w := startWriter(live, j, dorisUpdates(b, f.shape, 10_000, 2), time.Millisecond)
		time.Sleep(3 * time.Second)
		base := w.take()
		ps := startPeakSampler()
		b.StartTimer()
		start := time.Now()
		clock.tick(time.Minute)
		r := <-ticks
		took := time.Since(start)
		b.StopTimer()
		peak := ps.finish()
		during := w.take()
		w.finish()
		if r.err != nil {
			b.Fatal(r.err)
		}
		if r.info.Index != want.Index || r.info.CRC != want.CRC {
			b.Fatalf("adopted image %d (crc %08x), want the peer's %d (crc %08x)", r.info.Index, r.info.CRC, want.Index, want.CRC)
		}
		cp.Close()
		s.Close()
		b.ReportMetric(took.Seconds(), "adopt-s")
		b.ReportMetric(float64(peak)/float64(heap), "peak-heap-ratio")
		b.ReportMetric(float64(ps.peakLive.Load())/float64(heap), "peak-live-ratio")
		b.ReportMetric(float64(p99(during))/float64(p99(base)), "write-p99-ratio")
		b.ReportMetric(float64(r.info.Size)/1e6, "image-MB")
		b.ReportMetric(float64(heap)/1e6, "live-heap-MB")
		b.ReportMetric(ms(fsync), "fsync-p50-ms")
		b.StartTimer()
	}
}

// BenchmarkRestore: a node fetches the Doris image from a peer over
// loopback HTTP into its data dir (fsynced) and installs it into its live
// catalog. staged=true is the real path (the catalog is a Stager: the image
// is decoded while it downloads and Install swaps it in); staged=false
// hides Stage, so the file is downloaded first and loaded at Install.
func BenchmarkRestore(b *testing.B) {
	for _, staged := range []bool{true, false} {
		b.Run(fmt.Sprintf("staged=%v", staged), func(b *testing.B) { benchRestore(b, staged) })
	}
}

// loadOnly is a catalog that is not a Stager.
type loadOnly struct{ t *catalog.Tree }

func (l loadOnly) Apply(index uint64, data []byte) any { return l.t.Apply(index, data) }
func (l loadOnly) Save(w io.Writer) error              { return l.t.Save(w) }
func (l loadOnly) Load(r io.Reader) error              { return l.t.Load(r) }

func benchRestore(b *testing.B, staged bool) {
	f := fixture(b)
	src, err := Open(Config{Dir: f.dir, State: catalog.New(), ClusterID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	srv := httptest.NewServer(src.Handler())
	defer srv.Close()
	// The figures are means over the iterations (-benchtime Nx): one
	// restore is noisy on a shared 2-core machine.
	var fsync, took, fetched, verify time.Duration
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		fsync += fsyncP50(b, dir)
		live := catalog.New()
		var st State = live
		if !staged {
			st = loadOnly{live}
		}
		s, err := Open(Config{Dir: dir, State: st, ClusterID: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		b.StartTimer()
		start := time.Now()
		if err := s.Fetch(context.Background(), srv.URL, f.base); err != nil {
			b.Fatal(err)
		}
		fetched += time.Since(start)
		if err := s.Install(context.Background(), f.base); err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
		b.StopTimer()
		vstart := time.Now()
		if _, err := s.Verify(f.base); err != nil {
			b.Fatal(err)
		}
		verify += time.Since(vstart)
		if live.Len() != f.shape.Nodes() {
			b.Fatalf("restored %d nodes, want %d", live.Len(), f.shape.Nodes())
		}
		s.Close()
		b.StartTimer()
	}
	n := float64(b.N)
	mb := float64(f.size) / 1e6
	b.ReportMetric(mb*n/took.Seconds(), "restore-MB/s")
	b.ReportMetric(took.Seconds()/n, "restore-s")
	b.ReportMetric(fetched.Seconds()/n, "fetch-s")
	b.ReportMetric(mb*n/fetched.Seconds(), "fetch-MB/s")
	b.ReportMetric(verify.Seconds()/n, "verify-s")
	b.ReportMetric((took-fetched).Seconds()/n, "install-s")
	b.ReportMetric(mb, "image-MB")
	b.ReportMetric(ms(fsync)/n, "fsync-p50-ms")
}

// journalFixture is a single-node journal on the real disk holding the
// Doris catalog's image and the 100,000 entries proposed after it.
type journalFixture struct {
	shape benchshape.Doris
	dir   string
	last  uint64 // last index proposed
	image uint64
}

var journalFixtures = map[string]*journalFixture{}

func benchJournalConfig(dir string, tree *catalog.Tree, store *Store) journal.Config {
	return journal.Config{
		ID: 1, Dir: dir, Addr: "127.0.0.1:1", Bootstrap: true, Token: "bench",
		StateMachine: tree, Snapshots: store, TickInterval: 10 * time.Millisecond,
	}
}

// proposeAll proposes every batch from 32 goroutines (group commit) and
// returns the highest index.
func proposeAll(b *testing.B, j *journal.Journal, batches [][]byte) uint64 {
	var next, last atomic.Uint64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= uint64(len(batches)) || failed.Load() != nil {
					return
				}
				idx, _, err := j.Propose(context.Background(), batches[i])
				if err != nil {
					failed.Store(&err)
					return
				}
				for {
					l := last.Load()
					if idx <= l || last.CompareAndSwap(l, idx) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	if e := failed.Load(); e != nil {
		b.Fatal(*e)
	}
	return last.Load()
}

func startupFixture(b *testing.B) *journalFixture {
	b.Helper()
	fixturesMu.Lock()
	defer fixturesMu.Unlock()
	if f := journalFixtures[*dorisScale]; f != nil {
		return f
	}
	shape := shapeFor(*dorisScale)
	dir, err := os.MkdirTemp("", "image-bench-journal-")
	if err != nil {
		b.Fatal(err)
	}
	f := &journalFixture{shape: shape, dir: dir}
	journalFixtures[*dorisScale] = f // removed by cleanupBenchFixtures

	tree := catalog.New()
	store, err := Open(Config{Dir: dir, State: tree})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	j, err := journal.Open(ctx, benchJournalConfig(dir, tree, store))
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	if err := store.SetClusterID(j.Status().ClusterID); err != nil {
		b.Fatal(err)
	}
	for {
		changed := j.Leadership() // before the status: no change missed
		if j.Status().IsLeader() {
			break
		}
		<-changed
	}
	// Each database's batches in order, databases in parallel (group
	// commit): parents are always created before their children.
	perDB := make([][][]byte, shape.DBs)
	dorisBatches(b, shape, func(db int, d []byte) {
		if db < 0 {
			if _, _, err := j.Propose(ctx, d); err != nil {
				b.Fatal(err)
			}
			return
		}
		perDB[db] = append(perDB[db], d)
	})
	var wg sync.WaitGroup
	for _, batches := range perDB {
		wg.Go(func() {
			for _, d := range batches {
				_, v, err := j.Propose(ctx, d)
				if err == nil {
					err = v.(*catalog.Result).Err
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	cp, err := NewCheckpointer(CheckpointerConfig{Store: store, Journal: journal.ImageLogOf(j),
		Applied: func() uint64 { return j.Status().Applied }, NewState: func() State { return catalog.New() }})
	if err != nil {
		b.Fatal(err)
	}
	defer cp.Close()
	info, err := cp.Checkpoint(ctx)
	if err != nil {
		b.Fatal(err)
	}
	f.image = info.Index
	f.last = proposeAll(b, j, dorisUpdates(b, shape, benchEntries, 1))
	return f
}

// BenchmarkStartup: restart a node whose data dir (real disk) holds the
// Doris catalog's image and 100,000 journal entries after it: journal.Open
// loads the newest image (verified) through the Store, then raft replays
// the entries; startup-s runs until the last one is applied.
func BenchmarkStartup(b *testing.B) {
	f := startupFixture(b)
	for b.Loop() {
		b.StopTimer()
		tree := catalog.New()
		runtime.GC()
		b.StartTimer()
		start := time.Now()
		store, err := Open(Config{Dir: f.dir, State: tree})
		if err != nil {
			b.Fatal(err)
		}
		cfg := benchJournalConfig(f.dir, tree, store)
		cfg.Bootstrap = false
		j, err := journal.Open(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := j.WaitApplied(context.Background(), f.last); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		b.StopTimer()
		if got := j.Status().Image; got != f.image {
			b.Fatalf("started from image %d, want %d", got, f.image)
		}
		if tree.Len() != f.shape.Nodes() {
			b.Fatalf("catalog has %d nodes, want %d", tree.Len(), f.shape.Nodes())
		}
		j.Close()
		store.Close()
		b.ReportMetric(took.Seconds(), "startup-s")
		b.ReportMetric(float64(f.last-f.image), "entries")
		b.StartTimer()
	}
}
