package catalog

import (
	"runtime"
	"strings"
	"testing"

	"github.com/metatree/metatree/internal/benchshape"
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
// naive layout and in Tree, and reports both heaps per node, means over
// the iterations: the ratio is what the compact layout buys.
func BenchmarkNaiveTreeMemory(b *testing.B) {
	d := benchshape.Doris{DBs: 5, Tables: 50, Parts: 4, Tablets: 100, Replicas: 3, Workers: 100}
	var naive, compact uint64
	for b.Loop() {
		before := liveHeap()
		nt := &naiveTree{root: &naiveNode{id: 1}, byID: map[uint64]*naiveNode{}, byKind: map[string]map[uint64]*naiveNode{}, index: map[Value]map[uint64]*naiveNode{}}
		id := uint64(2)
		// parents[depth] is the newest node at that depth; depth 0 is the
		// root, and Walk creates each node after its parent.
		parents := [6]*naiveNode{nt.root}
		depth := map[string]int{"database": 1, "table": 2, "partition": 3, "tablet": 4, "replica": 5}
		d.Walk(func(n benchshape.Node) {
			var attrs map[string]Value
			switch n.Kind {
			case "table":
				attrs = map[string]Value{"engine": String("olap")}
			case "replica":
				r := n.Replica
				attrs = map[string]Value{"size": Int(r.Size), "state": String(r.State), "version": Int(r.Version), "worker": Int(r.Worker)}
			}
			// A clone, so that the name does not keep the whole path alive.
			name := strings.Clone(n.Path[strings.LastIndexByte(n.Path, '/')+1:])
			k := depth[n.Kind]
			parents[k] = nt.add(parents[k-1], id, name, n.Kind, attrs)
			id++
		})
		naive += liveHeap() - before
		runtime.KeepAlive(nt)
		nt = nil

		before = liveHeap()
		tr := New()
		buildDoris(b, d, tr, 1, 100)
		compact += liveHeap() - before
		runtime.KeepAlive(tr)
	}
	nodes := float64(d.Nodes()) * float64(b.N)
	b.ReportMetric(float64(naive)/nodes, "naive-bytes/node")
	b.ReportMetric(float64(compact)/nodes, "bytes/node")
	b.ReportMetric(float64(naive)/float64(compact), "ratio")
}
