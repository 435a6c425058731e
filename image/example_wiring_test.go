package image_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
)

// What a host writes to give a node images: a Store on the data dir as the
// journal's Snapshots hook, its Handler beside the journal's on the node's
// HTTP server, and a Checkpointer. (In memory here; a real node leaves FS
// nil for the disk.)
func Example_wiring() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fs := vfs.NewMem()
	tree := catalog.New()

	// 1. The image store, before the journal: the journal loads the newest
	// image through it when it opens.
	store, err := image.Open(image.Config{Dir: "/node1", FS: fs, State: tree, Token: "secret"})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	// 2. The journal, with the catalog as its state machine and the store as
	// its Snapshots hook.
	j, err := journal.Open(ctx, journal.Config{
		ID: 1, Dir: "/node1", FS: fs, Addr: ln.Addr().String(), Bootstrap: true, Token: "secret",
		StateMachine: tree, Snapshots: store, TickInterval: 10 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	defer j.Close()
	if err := store.SetClusterID(j.Status().ClusterID); err != nil {
		panic(err) // the images belong to another cluster
	}

	// 3. Both handlers on the node's server.
	mux.Handle("/raft/", j.Handler())
	mux.Handle(image.PathPrefix, store.Handler())

	// 4. The checkpointer: shadow replay into fresh catalogs.
	cp, err := image.NewCheckpointer(image.CheckpointerConfig{
		Store: store, Journal: journal.ImageLogOf(j),
		Applied:  func() uint64 { return j.Status().Applied },
		NewState: func() image.State { return catalog.New() },
	})
	if err != nil {
		panic(err)
	}
	defer cp.Close() // first: it reads the journal

	// Wait to lead: take the change channel before reading the status, so
	// that a change between the two is not missed.
	for {
		changed := j.Leadership()
		if j.Status().IsLeader() {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			panic("no leader")
		}
	}
	batch, _ := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/db1", Kind: "database"}}}.Encode()
	index, _, err := j.Propose(ctx, batch)
	if err != nil {
		panic(err)
	}
	info, err := cp.Checkpoint(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("image covers the write:", info.Index >= index)
	fmt.Println("journal knows it:", j.Status().Image == info.Index)
	// Output:
	// image covers the write: true
	// journal knows it: true
}
