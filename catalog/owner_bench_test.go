package catalog

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/benchshape"
)

// ownedBenchTree returns a tree holding /m and n nodes under /o, owned by
// /m's version 1 when owned is set, and the next index.
func ownedBenchTree(b testing.TB, n int, owned bool) (*Tree, uint64) {
	tr := New()
	mustApply(b, tr, 1, Batch{Ops: []Op{{Type: OpCreate, Path: "/m", Kind: "member"}, {Type: OpCreate, Path: "/o", Kind: "dir"}}})
	index := uint64(2)
	for i := 0; i < n; {
		var ops []Op
		for ; i < n && len(ops) < 1000; i++ {
			op := Op{Type: OpCreate, Path: fmt.Sprintf("/o/t%07d", i), Kind: "task", Set: map[string]Value{"state": String("running")}}
			if owned {
				op.Owner = Owner{Path: "/m", Version: 1}
			}
			ops = append(ops, op)
		}
		mustApply(b, tr, index, Batch{Ops: ops})
		index++
	}
	return tr, index
}

// BenchmarkEndOwned: the apply of the one update that ends the version
// owning 100,000 nodes, which deletes them all (target: 100 ms).
func BenchmarkEndOwned(b *testing.B) {
	const n = 100_000
	end := encode(b, Op{Type: OpUpdate, Path: "/m", Set: map[string]Value{"gen": Int(2)}})
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		tr, index := ownedBenchTree(b, n, true)
		b.StartTimer()
		start := time.Now()
		if res := tr.Apply(index, end).(*Result); res.Err != nil {
			b.Fatal(res.Err)
		}
		total += time.Since(start)
		b.StopTimer()
		if tr.ownedCount() != 0 || len(tr.Children("/o")) != 0 {
			b.Fatal("owned nodes left")
		}
		b.StartTimer()
	}
	b.ReportMetric(total.Seconds()*1e3/float64(b.N), "ms/end")
}

// BenchmarkOwnedNodeHeap: the heap an owned node takes beyond an unowned
// one (target: 16 B), the mean over the iterations.
func BenchmarkOwnedNodeHeap(b *testing.B) {
	const n = 100_000
	heap := func(owned bool) (uint64, *Tree) {
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		tr, _ := ownedBenchTree(b, n, owned)
		runtime.GC()
		runtime.ReadMemStats(&m1)
		return m1.HeapAlloc - min(m0.HeapAlloc, m1.HeapAlloc), tr
	}
	var extra float64
	for b.Loop() {
		plain, t1 := heap(false)
		owned, t2 := heap(true)
		extra += float64(owned) - float64(plain)
		runtime.KeepAlive(t1)
		runtime.KeepAlive(t2)
	}
	b.ReportMetric(extra/n/float64(b.N), "B/owned-node")
}

func TestDorisPairOwnsEveryHundredthNodeInOneTreeOnly(t *testing.T) {
	d := benchshape.Doris{DBs: 1, Tables: 5, Parts: 4, Tablets: 10, Replicas: 3, Workers: 3}
	trees := [2]*Tree{New(), New()}
	ops, _, _ := buildDorisPair(t, d, trees, 100, 100)
	// The walk creates all but the root; the index definition is one more
	// operation, and the members are not counted.
	require.Equal(t, [2]int{d.Nodes(), d.Nodes()}, ops)
	require.Equal(t, dump(trees[0]), dump(trees[1]))
	require.Zero(t, trees[0].ownedCount())
	require.Equal(t, (d.Nodes()-1)/100, trees[1].ownedCount())
	// Ending a worker's version removes what it owns, and only that.
	for _, tr := range trees {
		mustApply(t, tr, 1000, Batch{Ops: []Op{{Type: OpUpdate, Path: "/workers/w001", Set: map[string]Value{"gen": Int(2)}}}})
		checkDigest(t, tr)
	}
	require.Equal(t, d.Nodes()+1+d.Workers, trees[0].Len())
	require.Less(t, trees[1].Len(), trees[0].Len())
	require.Less(t, trees[1].ownedCount(), (d.Nodes()-1)/100)
	require.Positive(t, trees[1].ownedCount())
}
