package catalog_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/metatree/metatree/catalog"
)

func TestCollectorCountsNodes(t *testing.T) {
	tree := catalog.New()
	if got := testutil.ToFloat64(tree.Collector()); got != 1 {
		t.Fatalf("metatree_catalog_nodes of a new tree = %v, want 1 (the root)", got)
	}
	data, err := catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/db", Kind: "database"},
		{Type: catalog.OpCreate, Path: "/db/t", Kind: "table"},
	}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	tree.Apply(1, data)
	if got := testutil.ToFloat64(tree.Collector()); got != 3 {
		t.Fatalf("metatree_catalog_nodes after two creates = %v, want 3", got)
	}
}
