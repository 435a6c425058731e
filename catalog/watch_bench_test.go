package catalog

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkWatchFanout: watchers on one subtree, each drained by its own
// goroutine, while the applier applies one-update batches under that subtree
// as fast as it can. It reports the events delivered per second (all
// watchers together), the p99 delay from a batch's Apply to a watcher
// receiving its event, the watchers cut off for falling behind, and the
// applier's rate against the same batches with no watchers
// (applier-ratio).
func BenchmarkWatchFanout(b *testing.B) {
	for _, watchers := range []int{0, 10_000} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			benchWatchFanout(b, watchers)
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

func benchWatchFanout(b *testing.B, watchers int) {
	const baseline = 4096
	// The applier's rate with nobody watching, on the same kind of batches.
	base := newFanoutTree(b)
	batches := fanoutBatches(b)
	t0 := time.Now()
	for i := range baseline {
		base.Apply(uint64(i+2), batches[i%len(batches)])
	}
	baseRate := baseline / time.Since(t0).Seconds()

	tr := newFanoutTree(b)
	// appliedAt[index % len] is when the batch at index started applying.
	var appliedAt [1 << 16]atomic.Int64
	var delivered, dropped atomic.Int64
	var mu sync.Mutex
	var delays []time.Duration
	var wg sync.WaitGroup
	ws := make([]*Watcher, watchers)
	for i := range ws {
		ws[i] = tr.Watch(WatchOptions{Prefix: "/sub", Buffer: 256})
		sample := i%100 == 0 // a hundred watchers record their delays
		w := ws[i]
		wg.Go(func() {
			var mine []time.Duration
			var n int64
			for ev := range w.Events() {
				n++
				if sample {
					mine = append(mine, time.Duration(time.Now().UnixNano()-appliedAt[ev.Index%uint64(len(appliedAt))].Load()))
				}
			}
			if w.Err() != nil {
				dropped.Add(1)
			}
			delivered.Add(n)
			mu.Lock()
			delays = append(delays, mine...)
			mu.Unlock()
		})
	}
	b.ReportAllocs()
	b.ResetTimer()
	index := uint64(1)
	start := time.Now()
	i := 0
	for b.Loop() {
		index++
		appliedAt[index%uint64(len(appliedAt))].Store(time.Now().UnixNano())
		tr.Apply(index, batches[i%len(batches)])
		i++
	}
	applyTime := time.Since(start)
	b.StopTimer()
	for _, w := range ws {
		w.Close()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.ReportMetric(float64(i)/applyTime.Seconds()/baseRate, "applier-ratio")
	if watchers > 0 {
		b.ReportMetric(float64(delivered.Load())/elapsed.Seconds(), "events/s")
		b.ReportMetric(float64(dropped.Load()), "cut-off")
		if len(delays) > 0 {
			slices.Sort(delays)
			b.ReportMetric(float64(delays[len(delays)*99/100])/1e6, "p99-ms")
		}
	}
}
