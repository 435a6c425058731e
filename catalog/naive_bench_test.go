package catalog

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
)

// naiveNode is the obvious Go layout of a catalog node (pointers and maps
// everywhere), kept only as a baseline for the memory benchmark.
type naiveNode struct {
	id, created, modified uint64
	parent                *naiveNode
	name, kind            string
	attrs                 map[string]Value
	children              map[string]*naiveNode
}

type naiveTree struct {
	root   *naiveNode
	byID   map[uint64]*naiveNode
	byKind map[string]map[uint64]*naiveNode
	index  map[Value]map[uint64]*naiveNode // replica worker
}

func (t *naiveTree) add(parent *naiveNode, id uint64, name, kind string, attrs map[string]Value) *naiveNode {
	n := &naiveNode{id: id, created: 1, modified: 1, parent: parent, name: name, kind: kind, attrs: attrs}
	if parent.children == nil {
		parent.children = map[string]*naiveNode{}
	}
	parent.children[name] = n
	t.byID[id] = n
	if t.byKind[kind] == nil {
		t.byKind[kind] = map[uint64]*naiveNode{}
	}
	t.byKind[kind][id] = n
	if w, ok := attrs["worker"]; ok && kind == "replica" {
		if t.index[w] == nil {
			t.index[w] = map[uint64]*naiveNode{}
		}
		t.index[w][id] = n
	}
	return n
}

// BenchmarkNaiveTreeMemory builds a 1/10 Doris shape (305,251 nodes) in the
// naive layout and in Tree, and reports both heaps per node: the ratio is
// what the compact layout buys.
func BenchmarkNaiveTreeMemory(b *testing.B) {
	d := dorisShape{5, 50, 4, 100, 3, 100}
	for b.Loop() {
		before := liveHeap()
		nt := &naiveTree{root: &naiveNode{id: 1}, byID: map[uint64]*naiveNode{}, byKind: map[string]map[uint64]*naiveNode{}, index: map[Value]map[uint64]*naiveNode{}}
		r := rand.New(rand.NewPCG(1, 2))
		id := uint64(2)
		tablet := 0
		for db := 0; db < d.dbs; db++ {
			dn := nt.add(nt.root, id, fmt.Sprintf("db%02d", db), "database", nil)
			id++
			for t := 0; t < d.tables; t++ {
				tn := nt.add(dn, id, fmt.Sprintf("tbl%02d", t), "table", map[string]Value{"engine": String("olap")})
				id++
				for p := 0; p < d.parts; p++ {
					pn := nt.add(tn, id, "p"+strconv.Itoa(p), "partition", nil)
					id++
					for k := 0; k < d.tablets; k++ {
						tablet++
						tb := nt.add(pn, id, "tablet"+strconv.Itoa(tablet), "tablet", nil)
						id++
						for rep := 0; rep < d.replicas; rep++ {
							nt.add(tb, id, "r"+strconv.Itoa(rep), "replica", map[string]Value{
								"size": Int(int64(r.IntN(1 << 30))), "state": String("NORMAL"),
								"version": Int(int64(1 + r.IntN(1000))), "worker": Int(int64((tablet*d.replicas + rep) % d.workers))})
							id++
						}
					}
				}
			}
		}
		naive := liveHeap() - before
		runtime.KeepAlive(nt)
		nt = nil

		before = liveHeap()
		tr := New()
		d.build(b, tr, 1, 100)
		compact := liveHeap() - before
		runtime.KeepAlive(tr)

		nodes := float64(d.nodes())
		b.ReportMetric(float64(naive)/nodes, "naive-bytes/node")
		b.ReportMetric(float64(compact)/nodes, "bytes/node")
		b.ReportMetric(float64(naive)/float64(compact), "ratio")
	}
}
