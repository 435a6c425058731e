package catalog_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/metatree/metatree/catalog"
)

func nodesGauge(t *testing.T, tree *catalog.Tree, want int) {
	t.Helper()
	exp := "# HELP metatree_catalog_nodes Nodes in the catalog, the root included.\n# TYPE metatree_catalog_nodes gauge\nmetatree_catalog_nodes " +
		itoa(want) + "\n"
	if err := testutil.CollectAndCompare(tree.Collector(), strings.NewReader(exp), "metatree_catalog_nodes"); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func TestCollectorCountsNodes(t *testing.T) {
	tree := catalog.New()
	nodesGauge(t, tree, 1) // the root
	data, err := catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/db", Kind: "database"},
		{Type: catalog.OpCreate, Path: "/db/t", Kind: "table"},
	}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	tree.Apply(1, data)
	nodesGauge(t, tree, 3)
}
