package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// workload is what every system runs in a round.
type workload struct {
	ops, clients, size, keys int
	read                     bool // linearizable reads on a follower instead of writes on the leader
	// warmup is how many writes every system takes, untimed, before the
	// timed operations: keys of their own (warmupKey), so the timed writes
	// create and update the same keys as without it.
	warmup int
}

func (w workload) validate() error {
	switch {
	case w.ops < 1:
		return fmt.Errorf("-ops %d: want at least 1", w.ops)
	case w.clients < 1:
		return fmt.Errorf("-clients %d: want at least 1", w.clients)
	case w.size < 8:
		return fmt.Errorf("-size %d: want at least 8 bytes (each value carries its operation number)", w.size)
	case w.keys < 1:
		return fmt.Errorf("-keys %d: want at least 1", w.keys)
	case w.warmup < 0:
		return fmt.Errorf("-warmup %d: want 0 or more", w.warmup)
	}
	return nil
}

// cluster is one system's 3 members, running in this process.
type cluster interface {
	// write stores val under key through the leader and returns once the
	// leader has applied it. first says whether this is the key's first
	// write in the run, for a system that distinguishes create and update.
	write(ctx context.Context, key string, val []byte, first bool) error
	// read reads key linearizably, through a follower where the system
	// can (readVia says which member serves it).
	read(ctx context.Context, key string) error
	// readVia names the member that serves reads: "follower" or "leader".
	readVia() string
	// close stops the members and waits for them.
	close() error
}

// system starts one system's cluster with its data dirs under dir.
type system struct {
	name  string
	start func(ctx context.Context, dir string) (cluster, error)
}

var allSystems = []system{
	{"metatree", startMetatree},
	{"etcd", startEtcd},
	{"hraft", startHraft},
}

func selectSystems(list string) ([]system, error) {
	var out []system
	for name := range strings.SplitSeq(list, ",") {
		i := slices.IndexFunc(allSystems, func(s system) bool { return s.name == name })
		if i < 0 {
			return nil, fmt.Errorf("-systems: unknown system %q (have metatree, etcd, hraft)", name)
		}
		out = append(out, allSystems[i])
	}
	return out, nil
}

// result is one system's figures in one round.
type result struct {
	opsPerSec float64
	p50, p99  time.Duration
	via       string
	// diskPerMember is the disk a member's data dir occupies at the end
	// of the run (allocated blocks, preallocated space included).
	diskPerMember int64
}

// key is the key operation i writes, as the peers' harnesses name it.
func (w workload) key(i int) string { return fmt.Sprintf("k%012d", i%w.keys) }

// warmupKey is the key warm-up write i creates. The warm-up's keys sort
// before the workload's, so that the timed writes meet their keys in the
// order they would without a warm-up: a timed create lands after every
// key that exists (metatree keeps a directory's children sorted, and a
// create that sorts before most of them moves them).
func warmupKey(i int) string { return fmt.Sprintf("a%012d", i) }

// runSystem starts s on a fresh dir under parent, runs the workload on it
// and removes the dir.
func runSystem(ctx context.Context, w workload, s system, parent string) (result, error) {
	dir, err := os.MkdirTemp(parent, "compare-"+s.name+"-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	c, err := s.start(ctx, dir)
	if err != nil {
		return result{}, fmt.Errorf("%s: start: %w", s.name, err)
	}
	res, err := w.drive(ctx, c)
	if err == nil {
		var total int64
		total, err = diskBytes(dir)
		res.diskPerMember = total / 3
	}
	if cerr := c.close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return result{}, fmt.Errorf("%s: %w", s.name, err)
	}
	return res, nil
}

// drive runs the warm-up, then the timed closed loop: w.clients
// goroutines take operation numbers until w.ops are done; the first
// failure stops the run.
func (w workload) drive(ctx context.Context, c cluster) (result, error) {
	if w.warmup > 0 {
		// A long-running cluster's state, for every system alike: its
		// memory grown and recycled, its files past their first sizes.
		_, _, err := w.closedLoop(ctx, w.warmup, func(ctx context.Context, i int, val []byte) error {
			return c.write(ctx, warmupKey(i), val, true)
		})
		if err != nil {
			return result{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	op := func(ctx context.Context, i int, val []byte) error { return c.write(ctx, w.key(i), val, i < w.keys) }
	if w.read {
		// The key read is written once, before the clock starts.
		if err := c.write(ctx, w.key(0), make([]byte, w.size), true); err != nil {
			return result{}, fmt.Errorf("write the key to read: %w", err)
		}
		op = func(ctx context.Context, _ int, _ []byte) error { return c.read(ctx, w.key(0)) }
	}
	lats, elapsed, err := w.closedLoop(ctx, w.ops, op)
	if err != nil {
		return result{}, err
	}
	return result{
		opsPerSec: float64(len(lats)) / elapsed.Seconds(),
		p50:       percentile(lats, 0.50),
		p99:       percentile(lats, 0.99),
		via:       c.readVia(),
	}, nil
}

// closedLoop runs n operations on w.clients goroutines, each taking the
// next operation number when its last operation returns, and returns
// every operation's latency and the time they took together. Operation i
// gets a distinct, incompressible value of w.size bytes that starts with
// i. The first failure stops the loop.
func (w workload) closedLoop(ctx context.Context, n int, op func(ctx context.Context, i int, val []byte) error) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	lats := make([][]time.Duration, w.clients)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range w.clients {
		wg.Go(func() {
			val := make([]byte, w.size)
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				for k := 8; k < len(val); k += 8 {
					v := rng.Uint64()
					for b := 0; b < 8 && k+b < len(val); b++ {
						val[k+b] = byte(v >> (8 * b))
					}
				}
				for b := range 8 {
					val[b] = byte(i >> (8 * b))
				}
				t0 := time.Now()
				err := op(ctx, i, val)
				lats[g] = append(lats[g], time.Since(t0))
				if err != nil {
					cancel(fmt.Errorf("operation %d: %w", i, err))
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, 0, err
	}
	return slices.Concat(lats...), elapsed, nil
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

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// fsyncP50 measures the disk under dir as a WAL commit uses it: the p50 of
// n appends of 256 bytes, each followed by an fsync, to a new file.
func fsyncP50(dir string, n int) (time.Duration, error) {
	f, err := os.CreateTemp(dir, "compare-fsync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 256)
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	return percentile(lat, 0.50), nil
}

// run runs the rounds and prints every round's figures, then the means
// and metatree's ratios.
func run(ctx context.Context, w workload, systems []system, rounds int, dir string, out io.Writer) error {
	mode := "write"
	if w.read {
		mode = "read"
	}
	fmt.Fprintf(out, "mode=%s ops=%d warmup=%d clients=%d size=%d keys=%d rounds=%d dir=%s\n", mode, w.ops, w.warmup, w.clients, w.size, w.keys, rounds, filepath.Clean(dir))
	results := make(map[string][]result)
	var fsyncs []time.Duration
	for r := 1; r <= rounds; r++ {
		p50, err := fsyncP50(dir, 300)
		if err != nil {
			return fmt.Errorf("fsync probe: %w", err)
		}
		fsyncs = append(fsyncs, p50)
		fmt.Fprintf(out, "round=%d disk_fsync_p50_ms=%.3f\n", r, ms(p50))
		for _, s := range systems {
			res, err := runSystem(ctx, w, s, dir)
			if err != nil {
				return fmt.Errorf("round %d: %w", r, err)
			}
			results[s.name] = append(results[s.name], res)
			fmt.Fprintf(out, "round=%d system=%s via=%s ops_per_s=%.0f p50_ms=%.3f p99_ms=%.3f disk_MiB_per_member=%.1f\n",
				r, s.name, viaFor(w, res), res.opsPerSec, ms(res.p50), ms(res.p99), mib(res.diskPerMember))
		}
	}
	fmt.Fprintf(out, "disk_fsync_p50_ms=%.3f (mean of %d rounds)\n", ms(meanDur(fsyncs)), len(fsyncs))
	for _, s := range systems {
		rs := results[s.name]
		fmt.Fprintf(out, "system=%s mean_ops_per_s=%.0f mean_p50_ms=%.3f mean_p99_ms=%.3f\n", s.name, meanOps(rs), ms(meanP(rs, 50)), ms(meanP(rs, 99)))
	}
	ours, ok := results["metatree"]
	if !ok {
		return nil
	}
	for _, s := range systems {
		if s.name == "metatree" {
			continue
		}
		theirs := results[s.name]
		var per []string
		for i := range ours {
			per = append(per, fmt.Sprintf("%.2f", ours[i].opsPerSec/theirs[i].opsPerSec))
		}
		fmt.Fprintf(out, "ratio metatree/%s ops_per_s=%.2f (rounds: %s) p99=%.2f\n",
			s.name, meanOps(ours)/meanOps(theirs), strings.Join(per, " "), float64(meanP(ours, 99))/float64(meanP(theirs, 99)))
	}
	return nil
}

func viaFor(w workload, r result) string {
	if w.read {
		return r.via
	}
	return "leader"
}

func meanOps(rs []result) float64 {
	var sum float64
	for _, r := range rs {
		sum += r.opsPerSec
	}
	return sum / float64(len(rs))
}

func meanP(rs []result, p int) time.Duration {
	var d []time.Duration
	for _, r := range rs {
		if p == 50 {
			d = append(d, r.p50)
		} else {
			d = append(d, r.p99)
		}
	}
	return meanDur(d)
}

func meanDur(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// errNotReady is returned when a cluster is not ready (a leader elected,
// every member following it) within the start timeout.
var errNotReady = errors.New("cluster not ready within the start timeout")

// waitFor calls cond every 10 ms until it holds, ctx ends or timeout
// passes (then errNotReady).
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return errNotReady
			}
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
