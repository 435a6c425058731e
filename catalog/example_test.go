package catalog_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/metatree/metatree/catalog"
)

// apply encodes a batch and applies it at index, as the journal would after
// committing it.
func apply(t *catalog.Tree, index uint64, ops ...catalog.Op) *catalog.Result {
	data, err := catalog.Batch{Ops: ops}.Encode()
	if err != nil {
		panic(err)
	}
	return t.Apply(index, data).(*catalog.Result)
}

func Example_create() {
	t := catalog.New()
	res := apply(t, 1,
		catalog.Op{Type: catalog.OpCreate, Path: "/db1", Kind: "database"},
		catalog.Op{Type: catalog.OpCreate, Path: "/db1/orders", Kind: "table",
			Set: map[string]catalog.Value{"engine": catalog.String("olap"), "buckets": catalog.Int(16)}},
	)
	fmt.Println("ids:", res.IDs, "err:", res.Err)

	n, _ := t.Get("/db1/orders")
	fmt.Println(n.ID, n.Path, n.Kind, n.Attrs["engine"], n.Attrs["buckets"], n.Created)
	fmt.Println(t.Children("/db1"))
	// Output:
	// ids: [2 3] err: <nil>
	// 3 /db1/orders table olap 16 1
	// [orders]
}

// A batch is all or nothing: the second operation's precondition fails, so
// the first does not happen either, and the error names the failing op.
func Example_batchWithPrecondition() {
	t := catalog.New()
	apply(t, 1, catalog.Op{Type: catalog.OpCreate, Path: "/jobs", Kind: "dir"})
	apply(t, 2, catalog.Op{Type: catalog.OpCreate, Path: "/jobs/j1", Kind: "job",
		Set: map[string]catalog.Value{"state": catalog.String("pending")}})

	// Claim j1 only if nobody changed it since we read it at index 2.
	claim := func(index, seen uint64) error {
		return apply(t, index,
			catalog.Op{Type: catalog.OpUpdate, Path: "/jobs/j1", Set: map[string]catalog.Value{"state": catalog.String("running")},
				Cond: catalog.Cond{Modified: seen}},
			catalog.Op{Type: catalog.OpCreate, Path: "/jobs/j1.lock", Kind: "lock"},
		).Err
	}
	fmt.Println("first claim:", claim(3, 2))
	err := claim(4, 2) // stale: j1 was modified at 3
	fmt.Println("second claim:", err)
	fmt.Println("is conflict:", errors.Is(err, catalog.ErrConflict))
	var oe *catalog.OpError
	if errors.As(err, &oe) {
		fmt.Println("failing op:", oe.Op)
	}
	fmt.Println(t.Children("/jobs"), t.Index())
	// Output:
	// first claim: <nil>
	// second claim: catalog: op 0 (update "/jobs/j1"): precondition failed: modified at 3 (want 2)
	// is conflict: true
	// failing op: 0
	// [j1 j1.lock] 4
}

// Secondary indexes are created by a replicated operation, so every replica
// has them; Find uses them.
func Example_indexLookup() {
	t := catalog.New()
	ops := []catalog.Op{
		{Type: catalog.OpCreateIndex, Kind: "replica", Attr: "worker"},
		{Type: catalog.OpCreate, Path: "/tablet1", Kind: "tablet"},
	}
	for r := 0; r < 3; r++ {
		ops = append(ops, catalog.Op{Type: catalog.OpCreate, Path: fmt.Sprintf("/tablet1/r%d", r), Kind: "replica",
			Set: map[string]catalog.Value{"worker": catalog.Int(int64(100 + r%2))}})
	}
	apply(t, 1, ops...)
	for _, n := range t.Find("replica", "worker", catalog.Int(100)) {
		fmt.Println(n.Path, n.Attrs["worker"])
	}
	fmt.Println(len(t.OfKind("replica")), "replicas")
	// Output:
	// /tablet1/r0 100
	// /tablet1/r2 100
	// 3 replicas
}

func Example_watch() {
	t := catalog.New()
	w := t.Watch(catalog.WatchOptions{Prefix: "/members", Buffer: 16})
	defer w.Close()

	apply(t, 1, catalog.Op{Type: catalog.OpCreate, Path: "/members", Kind: "dir"})
	apply(t, 2, catalog.Op{Type: catalog.OpCreate, Path: "/members/fe1", Kind: "member",
		Set: map[string]catalog.Value{"status": catalog.String("alive")}})
	apply(t, 3, catalog.Op{Type: catalog.OpUpdate, Path: "/members/fe1",
		Set: map[string]catalog.Value{"status": catalog.String("dead")}})
	apply(t, 4, catalog.Op{Type: catalog.OpCreate, Path: "/other", Kind: "dir"}) // not under the prefix

	for i := 0; i < 3; i++ {
		ev, err := w.Next(context.Background())
		if err != nil {
			fmt.Println(err)
			return
		}
		switch ev.Op {
		case catalog.OpUpdate:
			fmt.Println(ev.Index, ev.Op, ev.After.Path, ev.Before.Attrs["status"], "->", ev.After.Attrs["status"])
		default:
			fmt.Println(ev.Index, ev.Op, ev.After.Path)
		}
	}
	// Output:
	// 1 create /members
	// 2 create /members/fe1
	// 3 update /members/fe1 alive -> dead
}

// Tree.Read reads in place: the views it hands out copy nothing, and every
// read inside one call sees the same index.
func ExampleTree_Read() {
	t := catalog.New()
	apply(t, 1,
		catalog.Op{Type: catalog.OpCreate, Path: "/db1", Kind: "database"},
		catalog.Op{Type: catalog.OpCreate, Path: "/db1/orders", Kind: "table", Set: map[string]catalog.Value{"rows": catalog.Int(10)}},
		catalog.Op{Type: catalog.OpCreate, Path: "/db1/users", Kind: "table", Set: map[string]catalog.Value{"rows": catalog.Int(3)}},
	)
	t.Read(func(r catalog.Reader) {
		db, ok := r.Get("/db1")
		if !ok {
			return
		}
		var rows int64
		for tbl := range db.Children() {
			n, _ := tbl.Attr("rows")
			rows += n.Int64()
			fmt.Println(tbl.Name(), tbl.Kind(), n)
		}
		fmt.Println("rows at index", r.Index(), "=", rows)
	})
	// Output:
	// orders table 10
	// users table 3
	// rows at index 1 = 13
}
