package catalog_test

import (
	"fmt"

	"github.com/metatree/metatree/catalog"
)

// Table is a typed node: each field is one attribute.
type Table struct {
	Engine  string `catalog:"engine"`
	Buckets int    `catalog:"buckets"`
	Comment string `catalog:"comment,omitempty"`
	Cached  bool   `catalog:"-"` // not stored
}

func ExampleAttrs() {
	t := catalog.New()
	set, err := catalog.Attrs(Table{Engine: "olap", Buckets: 16})
	if err != nil {
		fmt.Println(err)
		return
	}
	res := apply(t, 1, catalog.Op{Type: catalog.OpCreate, Path: "/orders", Kind: "table", Set: set})
	fmt.Println("err:", res.Err)

	n, _ := t.Get("/orders")
	var tbl Table
	if err := n.Decode(&tbl); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%+v\n", tbl)

	buckets, ok := n.Attrs["buckets"].AsInt()
	fmt.Println("buckets:", buckets, ok)
	_, ok = n.Attrs["comment"].AsString()
	fmt.Println("comment present:", ok)
	// Output:
	// err: <nil>
	// {Engine:olap Buckets:16 Comment: Cached:false}
	// buckets: 16 true
	// comment present: false
}
