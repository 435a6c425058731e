package frontend_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
)

// Example starts a one-member cluster with the host's API on the same
// port, writes a table with a precondition, reads it back, and shuts down
// with a hand-off.
func Example() {
	dir, err := os.MkdirTemp("", "metatree-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	f, err := frontend.Start(ctx, frontend.Config{
		ID: 1, Dir: filepath.Join(dir, "1"), Addr: "127.0.0.1:0", Bootstrap: true,
		Token:   "cluster-secret", // or the TLS files; without either Start refuses
		Handler: http.NotFoundHandler(),
	})
	if err != nil {
		panic(err)
	}
	defer f.Close()

	res, err := f.Write(ctx, catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/orders", Kind: "table", Cond: catalog.Cond{Absent: true},
			Set: map[string]catalog.Value{"buckets": catalog.Int(16)}},
	}})
	if err != nil {
		panic(err)
	}
	n, _ := f.Tree().Get("/orders")
	fmt.Println(n.Path, n.Kind, n.Attrs["buckets"], n.Modified == res.Index)

	_, err = f.Write(ctx, catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/orders", Kind: "table", Cond: catalog.Cond{Absent: true}},
	}})
	fmt.Println("precondition failed:", errors.Is(err, catalog.ErrConflict))

	if err := f.Shutdown(ctx); err != nil {
		panic(err)
	}
	// Output:
	// /orders table 16 true
	// precondition failed: true
}
