package journal_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/internal/benchshape"
	"github.com/metatree/metatree/internal/peerid/peeridtest"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// The benchmarks run real nodes: HTTP on loopback, Pebble on the real disk
// with fsync, default timings unless a benchmark says otherwise. Figures
// for the README (run each once, alone on the machine):
//
//	go test -run '^$' -bench 'BenchmarkPropose' -benchtime 200000x ./journal
//	go test -run '^$' -bench 'BenchmarkFailover' -benchtime 5x ./journal
//	go test -run '^$' -bench 'BenchmarkReplay' -benchtime 1x ./journal

// countSM is the trivial state machine: it counts.
type countSM struct{ n atomic.Uint64 }

func (s *countSM) Apply(uint64, []byte) any { s.n.Add(1); return nil }

// syncFS counts and times the fsyncs Pebble (and the journal) issue on
// one node's files. A nonzero delay makes every sync take that much
// longer: a slow disk on that node alone.
type syncFS struct {
	vfs.FS
	delay atomic.Int64 // nanoseconds added to each sync
	syncs atomic.Uint64
	mu    sync.Mutex
	lat   []time.Duration
}

type syncFile struct {
	vfs.File
	fs *syncFS
}

func (f syncFile) timed(sync func() error) error {
	t0 := time.Now()
	if d := time.Duration(f.fs.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	err := sync()
	d := time.Since(t0)
	f.fs.syncs.Add(1)
	f.fs.mu.Lock()
	f.fs.lat = append(f.fs.lat, d)
	f.fs.mu.Unlock()
	return err
}

func (f syncFile) Sync() error     { return f.timed(f.File.Sync) }
func (f syncFile) SyncData() error { return f.timed(f.File.SyncData) }

func (f syncFile) SyncTo(length int64) (fullSync bool, err error) {
	err = f.timed(func() error {
		var e error
		fullSync, e = f.File.SyncTo(length)
		return e
	})
	return fullSync, err
}

func (fs *syncFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return syncFile{File: f, fs: fs}, nil
}

func (fs *syncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, c))
}

func (fs *syncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, c, o...))
}

func (fs *syncFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(old, name, c))
}

func (fs *syncFS) OpenDir(name string) (vfs.File, error) { return fs.wrap(fs.FS.OpenDir(name)) }

// take returns the sync count and latencies since the last take.
func (fs *syncFS) take() (uint64, []time.Duration) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	lat := fs.lat
	fs.lat = nil
	return fs.syncs.Swap(0), lat
}

// fsyncProbe measures the disk under dir: p50 of 256-byte appends each
// followed by fdatasync, the shape of a WAL commit, made by writers
// goroutines at once, each on a file of its own. One writer is the disk's
// own figure; three is what the benchmark's three WALs contend for (on this
// VM about twice the lone figure). cpu is the CPU time one append and its
// fdatasync cost the writing thread (kernel time included: on a virtual
// machine a flush to the disk is CPU work), the floor each of a write's
// synced appends adds to cpu-us/op; 0 where it cannot be read.
func fsyncProbe(tb testing.TB, dir string, writers int) (p50, cpu time.Duration) {
	lats := make([][]time.Duration, writers)
	cpus := make([]time.Duration, writers)
	errs := make([]error, writers)
	const rounds = 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			lats[w], cpus[w], errs[w] = fsyncLoop(filepath.Join(dir, fmt.Sprintf("fsync-probe-%d", w)), rounds)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	var total time.Duration
	for _, c := range cpus {
		total += c
	}
	return percentile(slices.Concat(lats...), 0.50), total / time.Duration(writers*rounds)
}

// fsyncLoop appends 256 bytes and fdatasyncs, n times, to a new file at
// path (removed after), and returns each round's latency and the CPU time
// the n rounds cost the thread that made them.
func fsyncLoop(path string, n int) ([]time.Duration, time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.Create(path)
	if err != nil {
		return nil, 0, err
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, 256)
	lat := make([]time.Duration, 0, n)
	cpu0 := benchshape.ThreadCPU()
	for range n {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return nil, 0, err
		}
		if err := f.Sync(); err != nil {
			return nil, 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, benchshape.ThreadCPU() - cpu0, nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// syncFSs holds each node's syncFS, of its current run.
type syncFSs struct {
	mu  sync.Mutex
	fss map[uint64]*syncFS
}

// wrap is a journaltest.Options.WrapFS: node id's syncs are counted.
func (s *syncFSs) wrap(id uint64, fs vfs.FS) vfs.FS {
	sfs := &syncFS{FS: fs}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fss[id] = sfs
	return sfs
}

// of returns node id's filesystem of its current run.
func (s *syncFSs) of(id uint64) *syncFS {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fss[id]
}

// newHTTPCluster starts `voters` nodes as the benchmarks run them (see
// startHTTPCluster): node 1 bootstraps, the others join. mod, if set,
// adjusts each node's Config before Open.
func newHTTPCluster(tb testing.TB, voters int, mod func(*journal.Config)) *journaltest.Cluster {
	c, _ := startHTTPCluster(tb, journaltest.Options{Voters: voters}, mod)
	return c
}

// startHTTPCluster starts a journaltest.Cluster of opts' Voters and TLS as
// the benchmarks run it: journal's HTTP transport on loopback, Pebble on
// the real disk with each node's syncs counted (the returned syncFSs),
// journal's default timings, and countSM state machines.
func startHTTPCluster(tb testing.TB, opts journaltest.Options, mod func(*journal.Config)) (*journaltest.Cluster, *syncFSs) {
	fss := &syncFSs{fss: map[uint64]*syncFS{}}
	opts.Transport, opts.OnDisk = journaltest.HTTP, true
	opts.NewStateMachine = func(uint64) journal.StateMachine { return &countSM{} }
	opts.WrapFS = fss.wrap
	opts.Configure = func(cfg *journal.Config) {
		// journal's defaults, as a deployment runs.
		cfg.TickInterval, cfg.ElectionTicks, cfg.HeartbeatTicks = 0, 0, 0
		if mod != nil {
			mod(cfg)
		}
	}
	return journaltest.NewCluster(tb, opts), fss
}

// waitLeader waits, on leadership notifications, until a leader leads a
// majority of c, and returns it; it fails the benchmark or test after
// 60 s.
func waitLeader(ctx context.Context, tb testing.TB, c *journaltest.Cluster) uint64 {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		var sts []string
		for _, n := range c.Running() {
			st := n.Journal().Status()
			sts = append(sts, fmt.Sprintf("%d: %s leader %d term %d applied %d members %v", n.ID, st.State, st.Leader, st.Term, st.Applied, st.Members))
		}
		tb.Fatalf("no leader: %v; %v", err, sts)
	}
	return leader
}

// BenchmarkPropose: 3 voters over HTTP on loopback, Pebble on disk with
// fsync, 256-byte entries, N concurrent proposers on the leader (or on a
// follower, which forwards). b.N counts proposals.
func BenchmarkPropose(b *testing.B) {
	c, fss := startHTTPCluster(b, journaltest.Options{Voters: 3}, nil)
	leader := waitLeader(b.Context(), b, c)
	warmUp(b, c, leader)
	follower := leader%3 + 1
	for _, bc := range []struct {
		name      string
		via       uint64
		proposers int
		scraped   bool // collectors registered and scraped every second
	}{
		{"proposers=1", leader, 1, false},
		{"proposers=64", leader, 64, false},
		{"proposers=64/metrics=scraped", leader, 64, true},
		{"via=follower/proposers=1", follower, 1, false},
		{"via=follower/proposers=64", follower, 64, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.scraped {
				defer scrapeEverySecond(b, c)()
			}
			runPropose(b, c, fss, leader, bc.via, bc.proposers)
		})
	}
	// One follower's disk takes slowSync per fsync: the leader commits with
	// the other follower, so ops/s and p99-ms stay near proposers=64. It
	// runs after the healthy variants, and the follower catches up before
	// the next.
	b.Run("proposers=64/slow-follower", func(b *testing.B) {
		slow := fss.of(follower)
		slow.delay.Store(int64(slowSync))
		runPropose(b, c, fss, leader, leader, 64)
		slow.delay.Store(0)
		if err := c.Node(follower).Journal().WaitApplied(b.Context(), c.Node(leader).Journal().Status().Applied); err != nil {
			b.Fatalf("slow follower %d catching up: %v", follower, err)
		}
	})
	// The same write path over mutual TLS, beside proposers=64 over plain
	// HTTP: the README's TLS ratio is the ops/s of the two.
	b.Run("mtls/proposers=64", func(b *testing.B) {
		c, fss := newMTLSCluster(b, 3, peeridtest.NewCA(b, "bench-ca"), nil)
		leader := waitLeader(b.Context(), b, c)
		warmUp(b, c, leader)
		runPropose(b, c, fss, leader, leader, 64)
	})
}

// slowSync is the fsync latency of the slow follower in
// BenchmarkPropose's slow-follower variant and TestSlowFollowerCatchesUp.
const slowSync = 100 * time.Millisecond

func runPropose(b *testing.B, c *journaltest.Cluster, fss *syncFSs, leader, via uint64, proposers int) {
	fsyncP50, fsyncCPU := fsyncProbe(b, c.Node(leader).Dir, 1)
	fsync3P50, _ := fsyncProbe(b, c.Node(leader).Dir, 3)
	payloads := proposePayloads()
	nodes := c.Running()
	for _, n := range nodes {
		fss.of(n.ID).take()
	}
	// allocs/op and B/op count the whole process: the three replicas and
	// the proposers, as cpu-us/op does.
	b.ReportAllocs()
	b.ResetTimer()
	stopProfile := startProposeProfile(b)
	cpu0, kernel0, faults0 := benchshape.ProcessCPU(), benchshape.KernelCPU(), benchshape.PageFaults()
	elapsed, lats, err := proposeN(b.Context(), c.Node(via).Journal(), payloads, 0, b.N, proposers)
	cpu, kernel, faults := benchshape.ProcessCPU()-cpu0, benchshape.KernelCPU()-kernel0, benchshape.PageFaults()-faults0
	b.StopTimer()
	stopProfile()
	syncs, walLat := fss.of(leader).take()
	allSyncs := syncs
	for _, n := range nodes {
		if n.ID != leader {
			s, _ := fss.of(n.ID).take()
			allSyncs += s
		}
	}
	if err != nil {
		b.Fatal(err)
	}

	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(ms(percentile(lats, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(lats, 0.99)), "p99-ms")
	b.ReportMetric(float64(syncs)/float64(b.N), "syncs/op")
	b.ReportMetric(float64(allSyncs)/float64(b.N), "all-syncs/op")
	b.ReportMetric(ms(percentile(walLat, 0.50)), "leader-fsync-p50-ms")
	// The leader's slowest syncs hold every proposer: nothing is applied
	// on it (and so no Propose returns) before its synced write returns.
	// The disk's rare slow fsyncs set a floor under p99-ms.
	b.ReportMetric(ms(percentile(walLat, 0.99)), "leader-fsync-p99-ms")
	b.ReportMetric(ms(slices.Max(append(walLat, 0))), "leader-fsync-max-ms")
	b.ReportMetric(ms(fsyncP50), "disk-fsync-p50-ms")
	b.ReportMetric(ms(fsync3P50), "disk-fsync3-p50-ms")
	if fsyncCPU > 0 {
		// all-syncs/op × disk-fsync-cpu-us is the part of cpu-us/op the
		// three replicas' fsyncs cost: the floor batching sets.
		b.ReportMetric(float64(fsyncCPU.Nanoseconds())/1e3, "disk-fsync-cpu-us")
	}
	if cpu > 0 {
		// All three replicas and the proposers share this process: this is
		// the CPU one replicated write costs them together (50,000 writes/s
		// on 2 cores leave 40 µs, with nothing to spare).
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
	}
	if kernel > 0 {
		// The kernel's part of cpu-us/op: the replicas' fsyncs, their
		// loopback TCP and futex wake-ups. Only fewer system calls a
		// write lower it.
		b.ReportMetric(float64(kernel.Microseconds())/float64(b.N), "kernel-cpu-us/op")
	}
	if faults > 0 {
		// The first touches of fresh memory: memtables Pebble allocates
		// instead of recycling one, and the heap growing. warmUp takes a
		// cluster's start-up share of them before the timer, so this
		// counts what a long-running node pays.
		b.ReportMetric(float64(faults)/float64(b.N), "faults/op")
	}
}

// proposeProfile names the CPU profile of BenchmarkPropose's timed
// writes. go test's -cpuprofile covers the whole run, the cluster's
// start-up and warmUp's 32-KiB entries included, which skews it towards
// copying and fresh memory; this one starts after the warm-up and stops
// with the timer.
var proposeProfile = flag.String("propose.cpuprofile", "",
	"write a CPU profile of BenchmarkPropose's timed writes to this file, suffixed with the sub-benchmark's name (each run of it overwrites its file: use -benchtime Nx)")

// startProposeProfile starts the profile -propose.cpuprofile asks for and
// returns what stops it.
func startProposeProfile(b *testing.B) (stop func()) {
	if *proposeProfile == "" {
		return func() {}
	}
	f, err := os.Create(*proposeProfile + "-" + strings.NewReplacer("/", "_", " ", "_").Replace(b.Name()) + ".prof")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}

// warmUpBytes is the log a cluster writes before BenchmarkPropose times
// it: past Pebble's growing memtables (doubling up to raftstore's
// memTableSize) and its first two full-size ones, after which a new
// memtable reuses a flushed one's memory. faults/op shows whether it is
// still enough.
const warmUpBytes = 128 << 20

// warmUp writes warmUpBytes through the leader in 32-KiB entries, so that
// the timed writes run on the memory a long-running cluster has: its
// memtables recycled and its heap grown. A fresh memtable's first touch
// faults every page in, which on a virtual machine costs microseconds a
// page (BenchmarkPageFault); a cluster pays that once.
func warmUp(b *testing.B, c *journaltest.Cluster, leader uint64) {
	b.Helper()
	const size = 32 << 10
	payloads := make([][]byte, 64)
	for i := range payloads {
		payloads[i] = bytes.Repeat([]byte{byte(i)}, size)
	}
	if _, _, err := proposeN(b.Context(), c.Node(leader).Journal(), payloads, 1<<40, warmUpBytes/size, 64); err != nil {
		b.Fatalf("warming the cluster up: %v", err)
	}
	for _, n := range c.Running() {
		if err := n.Journal().WaitApplied(b.Context(), c.Node(leader).Journal().Status().Applied); err != nil {
			b.Fatalf("node %d catching up after the warm-up: %v", n.ID, err)
		}
	}
}

// proposePayloads returns the 256-byte entries the Propose benchmarks cycle
// through, the same on every run.
func proposePayloads() [][]byte {
	payloads := make([][]byte, 1024)
	rng := rand.New(rand.NewPCG(0, 1))
	for i := range payloads {
		payloads[i] = make([]byte, 256)
		for k := range payloads[i] {
			payloads[i][k] = byte(rng.Uint32())
		}
	}
	return payloads
}

// proposeN proposes n entries through j from `proposers` goroutines,
// numbering them from first so that every entry differs, and returns the
// wall time they took and each proposal's latency. An error names how
// many proposals failed and the first failure.
func proposeN(ctx context.Context, j *journal.Journal, payloads [][]byte, first, n, proposers int) (time.Duration, []time.Duration, error) {
	var next atomic.Int64
	next.Store(int64(first))
	last := int64(first + n)
	lats := make([][]time.Duration, proposers)
	var failed atomic.Int64
	var firstErr atomic.Pointer[error]
	start := time.Now()
	var wg sync.WaitGroup
	for p := range proposers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > last {
					return
				}
				data := slices.Clone(payloads[i%int64(len(payloads))])
				data[0], data[1], data[2], data[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24) // distinct entries
				t0 := time.Now()
				_, _, err := j.Propose(ctx, data)
				lats[p] = append(lats[p], time.Since(t0))
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := firstErr.Load(); e != nil {
		return elapsed, nil, fmt.Errorf("%d of %d proposals failed, first: %w", failed.Load(), n, *e)
	}
	return elapsed, slices.Concat(lats...), nil
}

// BenchmarkFailover: with default timings (100 ms tick, 10 election ticks),
// the time from closing the leader to the first write committed by a new
// leader. Each iteration restarts the old leader and lets it catch up first.
func BenchmarkFailover(b *testing.B) {
	const electionTimeout = 10 * 100 * time.Millisecond // the defaults
	c := newHTTPCluster(b, 3, nil)
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		ctx := b.Context()
		leader := waitLeader(ctx, b, c)
		survivor := c.Node(leader%3 + 1).Journal()
		idx, _, err := survivor.Propose(ctx, []byte("before"))
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range c.Nodes() { // everyone caught up: a fair start
			if err := n.Journal().WaitApplied(ctx, idx); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		t0 := time.Now()
		if err := c.Stop(leader); err != nil {
			b.Fatal(err)
		}
		// Until a new leader commits it, a write fails in whatever way the
		// moment dictates (no leader, forwarded to the closed node, ...).
		for {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, _, err := survivor.Propose(pctx, []byte("after"))
			cancel()
			if err == nil {
				break
			}
			if time.Since(t0) > 30*time.Second {
				b.Fatalf("no write committed 30 s after closing the leader: %v", err)
			}
		}
		d := time.Since(t0)
		total += d
		b.StopTimer()
		if err := c.Restart(ctx, leader); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	mean := total / time.Duration(b.N)
	b.ReportMetric(ms(mean), "failover-ms")
	b.ReportMetric(float64(mean)/float64(electionTimeout), "x-election-timeout")
}

// BenchmarkReplay: restart a node whose log holds 1,000,000 entries and no
// image; the trivial state machine counts. replay-entries/s covers Open to
// the last entry applied; first-replay-s is the first restart right after
// the bulk fill. JOURNAL_REPLAY_ENTRIES overrides the size for a quick run.
func BenchmarkReplay(b *testing.B) {
	entries := int64(1_000_000)
	if n, err := strconv.ParseInt(os.Getenv("JOURNAL_REPLAY_ENTRIES"), 10, 64); err == nil && n > 0 {
		entries = n // a quicker smoke run
	}
	dir := filepath.Join(b.TempDir(), "n1")
	cfg := journal.Config{ID: 1, Dir: dir, Addr: "127.0.0.1:1", Bootstrap: true, StateMachine: &countSM{}}
	j, err := journal.Open(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	// A single voter elects itself after a timeout.
	if err := journaltest.AwaitLeading(b.Context(), j); err != nil {
		b.Fatal(err)
	}
	// Fill the log: a single node, many proposers, so group commit packs
	// them (this part is not timed).
	payload := make([]byte, 256)
	var next atomic.Int64
	var wg sync.WaitGroup
	var fillErr atomic.Pointer[error]
	t0 := time.Now()
	for range 256 {
		wg.Go(func() {
			for next.Add(1) <= entries {
				if _, _, err := j.Propose(b.Context(), payload); err != nil {
					fillErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if e := fillErr.Load(); e != nil {
		b.Fatal(*e)
	}
	last := j.Status().Applied
	b.Logf("filled %d entries (last index %d) in %v", entries, last, time.Since(t0).Round(time.Millisecond))
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
	replay := func() (time.Duration, uint64) {
		sm := &countSM{}
		cfg := journal.Config{ID: 1, Dir: dir, Addr: "127.0.0.1:1", StateMachine: sm}
		t0 := time.Now()
		j, err := journal.Open(b.Context(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := j.WaitApplied(b.Context(), last); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		if err := j.Close(); err != nil {
			b.Fatal(err)
		}
		return d, sm.n.Load()
	}
	// The first open after the bulk fill also pays Pebble's compaction debt
	// from the fill (L0 files compacted while replaying), which a node
	// restarting in steady state does not: reported on its own.
	first, n := replay()
	if n < uint64(entries) {
		b.Fatalf("first replay applied %d user entries, want >= %d", n, entries)
	}
	var total time.Duration
	var applied uint64
	for b.Loop() {
		d, n := replay()
		total += d
		applied += n
	}
	if applied < uint64(b.N)*uint64(entries) {
		b.Fatalf("replayed %d user entries over %d runs, want >= %d each", applied, b.N, entries)
	}
	b.ReportMetric(float64(applied)/total.Seconds(), "replay-entries/s")
	b.ReportMetric(first.Seconds(), "first-replay-s") // after b.Loop: ResetTimer drops metrics
	b.ReportMetric(total.Seconds()/float64(b.N), "replay-s")
}
