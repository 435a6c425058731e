package catalog

import (
	"github.com/metatree/metatree/internal/benchshape"

	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkWatchFanout: watchers on one subtree, each read by its own
// goroutine through Next, while the applier applies one-update batches
// under that subtree as fast as it can. A watcher cut off for falling
// behind watches again at once, as a consumer that re-reads would, so the
// load lasts the whole run. Over the applier's timed run it reports the
// events the watchers received per second (all watchers together), the
// p99 delay from a batch's Apply to a watcher receiving its event, the
// cut-offs per second, the allocations of the whole process (applier and
// watchers; with no reader, the applier's own) per batch applied, and the
// applier's rate
// against the same batches with no watchers, applied before and after the
// watched run: in wall time (applier-ratio, which on few cores includes
// the time the scheduler gives the watchers' goroutines instead) and in
// the applier's own CPU time per batch (applier-cpu-ratio).
//
// watchers=1-unread registers one watcher that nothing reads: the applier
// records and publishes every event and wakes the notifier, but no
// watcher runs, so its ratio is the price of recording the events alone,
// which bounds the ratio of any number of watchers that read. watchers=1
// adds one reader, 10,000 the fan-out.
func BenchmarkWatchFanout(b *testing.B) {
	for _, c := range []struct {
		watchers int
		unread   bool
	}{{0, false}, {1, true}, {1, false}, {10_000, false}} {
		name := fmt.Sprintf("watchers=%d", c.watchers)
		if c.unread {
			name += "-unread"
		}
		b.Run(name, func(b *testing.B) {
			benchWatchFanout(b, c.watchers, c.unread)
		})
	}
}

const fanoutNodes = 1024

// fanoutBatches builds batches that each update one of the nodes under
// /sub; applied in a cycle, they never fail.
func fanoutBatches(b *testing.B) [][]byte {
	out := make([][]byte, fanoutNodes)
	for i := range out {
		out[i] = encode(b, Op{Type: OpUpdate, Path: fmt.Sprintf("/sub/n%d", i), Set: map[string]Value{"i": Int(int64(i))}})
	}
	return out
}

// newFanoutTree returns a tree with /sub and its nodes, at index 1.
func newFanoutTree(b *testing.B) *Tree {
	ops := []Op{{Type: OpCreate, Path: "/sub", Kind: "dir"}}
	for i := range fanoutNodes {
		ops = append(ops, Op{Type: OpCreate, Path: fmt.Sprintf("/sub/n%d", i), Kind: "k"})
	}
	tr := New()
	tr.Apply(1, encode(b, ops...))
	return tr
}

func benchWatchFanout(b *testing.B, watchers int, unread bool) {
	const baseline = 1 << 19
	// The applier's rate with nobody watching, on the same kind of batches.
	// The applier is this goroutine, on its own thread, so that its CPU
	// time per batch can be told from the time the scheduler gives the
	// watchers' goroutines.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	base := newFanoutTree(b)
	batches := fanoutBatches(b)
	baseIndex := uint64(1)
	// applyUnwatched applies baseline batches to base and returns the wall
	// and CPU time they took. It runs before the watched run and after it
	// (its watchers stopped), and the ratios are against both together:
	// this machine's speed drifts within a run. A first, unmeasured run
	// warms it: the first batches of a new tree grow its arena and caches,
	// and in a run this short they would count. It stamps each batch as the
	// watched run does, into stamps of its own, so that the ratios compare
	// the same loop.
	var baseAt stampRing
	applyUnwatched := func() (wall, cpu time.Duration) {
		t0, c0 := time.Now(), benchshape.ThreadCPU()
		for i := range baseline {
			baseIndex++
			baseAt.stamp(baseIndex)
			base.Apply(baseIndex, batches[i%len(batches)])
		}
		return time.Since(t0), benchshape.ThreadCPU() - c0
	}
	applyUnwatched()
	baseWall, baseCPU := applyUnwatched()

	// The watched tree is warmed as base was, before anyone watches it.
	tr := newFanoutTree(b)
	index := uint64(1)
	for i := range baseline {
		index++
		tr.Apply(index, batches[i%len(batches)])
	}
	var appliedAt stampRing
	// Each reader counts its events and cut-offs in a slot of its own
	// (a cache line each, so that counting costs no shared line), read
	// when the applier's timed run ends: the rates are of what the
	// readers received while the applier ran, not of what they drain
	// after it stops. Delays are sampled over the same window (open).
	var open atomic.Bool
	open.Store(true)
	var mu sync.Mutex
	var delays []time.Duration
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	opts := WatchOptions{Prefix: "/sub", Buffer: 256}
	readers := watchers
	if unread {
		w := tr.Watch(opts)
		defer w.Close()
		readers = 0
	}
	counts := make([]readerCount, readers)
	for i := range readers {
		w := tr.Watch(opts)
		sample := i%100 == 0 // a hundred watchers record their delays
		count := &counts[i]
		wg.Go(func() {
			var mine []time.Duration
			for {
				ev, err := w.Next(ctx)
				if err != nil {
					w.Close()
					if ctx.Err() != nil {
						break
					}
					count.cut.Add(1)
					w = tr.Watch(opts)
					continue
				}
				count.events.Add(1)
				if sample && open.Load() {
					mine = append(mine, appliedAt.since(ev.Index))
				}
			}
			mu.Lock()
			delays = append(delays, mine...)
			mu.Unlock()
		})
	}
	// The process's allocations during the timed run, every goroutine's:
	// the applier's and, with readers, theirs (testing's allocs/op would
	// charge them all to the applier's batches).
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	start, cpu0 := time.Now(), benchshape.ThreadCPU()
	vol0, invol0 := benchshape.ThreadSwitches()
	i := 0
	for b.Loop() {
		index++
		appliedAt.stamp(index)
		tr.Apply(index, batches[i%len(batches)])
		i++
	}
	applyTime := time.Since(start)
	applyCPU := benchshape.ThreadCPU() - cpu0
	vol, invol := benchshape.ThreadSwitches()
	var delivered, cut int64
	for k := range counts {
		delivered += counts[k].events.Load()
		cut += counts[k].cut.Load()
	}
	open.Store(false)
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	cancel()
	wg.Wait()
	wall2, cpu2 := applyUnwatched()
	baseRate := 2 * baseline / (baseWall + wall2).Seconds()
	baseCPU = (baseCPU + cpu2) / (2 * baseline)
	b.ReportMetric(float64(i)/applyTime.Seconds()/baseRate, "applier-ratio")
	// Why the applier was off its CPU: parked by the Go scheduler (its
	// thread sleeps) or preempted by the kernel for another thread.
	b.ReportMetric(float64(vol-vol0)/applyTime.Seconds(), "applier-parks/s")
	b.ReportMetric(float64(invol-invol0)/applyTime.Seconds(), "applier-kernel-preempts/s")
	if baseCPU > 0 && applyCPU > 0 {
		// The applier's own cost: its CPU time per batch, against none.
		b.ReportMetric(float64(baseCPU)/(float64(applyCPU)/float64(i)), "applier-cpu-ratio")
	}
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(i), "process-allocs/batch")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(i), "process-B/batch")
	if readers > 0 {
		b.ReportMetric(float64(delivered)/applyTime.Seconds(), "events/s")
		b.ReportMetric(float64(cut)/applyTime.Seconds(), "cut-offs/s")
		if len(delays) > 0 {
			slices.Sort(delays)
			b.ReportMetric(float64(delays[len(delays)*99/100])/1e6, "p99-ms")
		}
	}
}

// readerCount is one reader's events and cut-offs, on a cache line of its
// own.
type readerCount struct {
	events, cut atomic.Int64
	_           [48]byte
}

// stampRing holds when each of the last batches started applying, each
// stamp on a cache line of its own: a watcher reading the stamp of the
// batch it received never shares a line with the one the applier writes
// next, which would cost the applier a miss a batch that is the
// benchmark's, not the tree's.
type stampRing [1 << 16]struct {
	at atomic.Int64
	_  [56]byte
}

func (r *stampRing) stamp(index uint64) {
	r[index%uint64(len(r))].at.Store(time.Now().UnixNano())
}

// since returns the time since the batch at index started applying.
func (r *stampRing) since(index uint64) time.Duration {
	return time.Duration(time.Now().UnixNano() - r[index%uint64(len(r))].at.Load())
}
