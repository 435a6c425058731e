package benchshape

import (
	"strings"
	"testing"
)

func TestWalkMatchesShape(t *testing.T) {
	d := Doris{2, 3, 2, 4, 3, 5}
	seen := map[string]bool{"": true} // the root
	kinds := map[string]int{}
	replicas := 0
	d.Walk(func(n Node) {
		parent := n.Path[:strings.LastIndexByte(n.Path, '/')]
		if !seen[parent] {
			t.Fatalf("%s created before its parent", n.Path)
		}
		if seen[n.Path] {
			t.Fatalf("%s created twice", n.Path)
		}
		seen[n.Path] = true
		kinds[n.Kind]++
		if n.Kind == "replica" {
			replicas++
			if got := d.ReplicaPath(n.Tablet, n.Rep); got != n.Path {
				t.Fatalf("ReplicaPath(%d, %d) = %s, Walk made %s", n.Tablet, n.Rep, got, n.Path)
			}
			if n.Replica.Worker < 0 || n.Replica.Worker >= int64(d.Workers) || n.Replica.Version < 1 || n.Replica.Version > 1000 {
				t.Fatalf("%s: attributes %+v out of range", n.Path, n.Replica)
			}
		}
	})
	if len(seen) != d.Nodes() {
		t.Fatalf("Walk made %d nodes with the root, Nodes says %d", len(seen), d.Nodes())
	}
	if replicas != d.ReplicaTotal() || kinds["tablet"] != d.TabletTotal() || kinds["database"] != d.DBs {
		t.Fatalf("kinds %v, want %d replicas and %d tablets", kinds, d.ReplicaTotal(), d.TabletTotal())
	}
}

func TestWalkIsDeterministic(t *testing.T) {
	var a, b []Node
	Small.Walk(func(n Node) { a = append(a, n) })
	Small.Walk(func(n Node) { b = append(b, n) })
	if len(a) != len(b) {
		t.Fatalf("%d nodes, then %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("node %d: %+v, then %+v", i, a[i], b[i])
		}
	}
}
