package journal_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metatree/metatree/internal/metricstest"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// BenchmarkReadBarrier: 3 voters and an observer over HTTP on loopback,
// Pebble on disk; N concurrent callers of ReadBarrier on the leader, a
// follower or the observer, no writes. b.N counts barriers; reads/round is
// how many of them shared a ReadIndex round. Figures for the
// README (alone on the machine, beside the embedded etcd Get of the
// comparison harness):
//
//	go test -run '^$' -bench 'BenchmarkReadBarrier' -benchtime 200000x ./journal
func BenchmarkReadBarrier(b *testing.B) {
	c := newHTTPCluster(b, 3, nil)
	leader := waitLeader(b.Context(), b, c)
	observer := addHTTPObserver(b, c)
	follower := leader%3 + 1
	for _, via := range []struct {
		name string
		id   uint64
	}{{"leader", leader}, {"follower", follower}, {"observer", observer}} {
		for _, readers := range []int{1, 64} {
			b.Run(fmt.Sprintf("via=%s/readers=%d", via.name, readers), func(b *testing.B) {
				runReadBarrier(b, c.Node(via.id).Journal(), readers)
			})
		}
	}
}

func runReadBarrier(b *testing.B, j *journal.Journal, readers int) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(j.Collector()); err != nil {
		b.Fatal(err)
	}
	const rounds = "metatree_journal_read_index_rounds_total"
	rounds0 := metricstest.Values(b, reg)[rounds]
	var next atomic.Int64
	lats := make([][]time.Duration, readers)
	var firstErr atomic.Pointer[error]
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for r := range readers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				err := j.ReadBarrier(b.Context())
				lats[r] = append(lats[r], time.Since(t0))
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if e := firstErr.Load(); e != nil {
		b.Fatalf("barrier failed: %v", *e)
	}
	all := slices.Concat(lats...)
	// How many barriers shared a ReadIndex round, on average.
	b.ReportMetric(float64(b.N)/(metricstest.Values(b, reg)[rounds]-rounds0), "reads/round")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "reads/s")
	b.ReportMetric(ms(percentile(all, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(all, 0.99)), "p99-ms")
}

// addHTTPObserver starts one more node of c, joining as an observer, and
// waits until it has applied what the leader had.
func addHTTPObserver(tb testing.TB, c *journaltest.Cluster) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := c.AddNode(ctx, journal.Observer)
	if err != nil {
		tb.Fatalf("open observer: %v", err)
	}
	if err := n.Journal().ReadBarrier(ctx); err != nil {
		tb.Fatalf("observer %d: %v", n.ID, err)
	}
	return n.ID
}
