package cancel

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/metatree/metatree/heartbeat/epoch"
)

// BenchmarkCancelFanout: 100,000 live queries, each coordinated by one of 3
// frontends with fragments on 3 of 100 workers; one worker restarts.
// cancel-ms is the time Apply takes to cancel the ~3,000 queries on it
// (contexts cancelled, indexes updated); bytes/query is the heap the
// registry holds per live query, the returned context included.
func BenchmarkCancelFanout(b *testing.B) {
	const (
		queries   = 100_000
		workers   = 100
		perQuery  = 3
		frontends = 3
	)
	rng := rand.New(rand.NewPCG(0, 1))
	epochs := make([]epoch.Epoch, workers+frontends)
	for i := range epochs {
		epochs[i] = epoch.New()
	}
	plan := make([][perQuery + 1]Member, queries)
	for i := range plan {
		c := rng.IntN(frontends)
		plan[i][0] = Member{Node: uint64(workers + c), Epoch: epochs[workers+c]}
		used := map[int]bool{}
		for k := 1; k <= perQuery; k++ {
			w := rng.IntN(workers)
			for used[w] {
				w = rng.IntN(workers)
			}
			used[w] = true
			plan[i][k] = Member{Node: uint64(w), Epoch: epochs[w]}
		}
	}
	var cancelTotal time.Duration
	var affected, bytes float64
	victim := uint64(rng.IntN(workers))
	for b.Loop() {
		r := New(Config{})
		for i := range epochs {
			r.Apply(epoch.Event{Index: uint64(i + 1), Node: uint64(i), Type: epoch.Added, NewEpoch: epochs[i]})
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		qs := make([]*Query, queries)
		ctx := context.Background()
		for i := range plan {
			q, err := r.Register(ctx, plan[i][0], plan[i][1:])
			if err != nil {
				b.Fatal(err)
			}
			qs[i] = q
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		// The qs slice itself belongs to the benchmark, not the registry.
		bytes = float64(after.HeapAlloc-before.HeapAlloc-uint64(8*queries)) / queries

		start := time.Now()
		n := r.Apply(epoch.Event{Index: 1000, Node: victim, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: epochs[victim], NewEpoch: epoch.New()})
		cancelTotal += time.Since(start)
		affected = float64(n)
		if r.Stats().Live != queries-n {
			b.Fatalf("live %d, want %d", r.Stats().Live, queries-n)
		}
		r.Close()
		runtime.KeepAlive(qs)
	}
	b.ReportMetric(float64(cancelTotal.Microseconds())/1000/float64(b.N), "cancel-ms")
	b.ReportMetric(affected, "affected")
	b.ReportMetric(bytes, "bytes/query")
}
