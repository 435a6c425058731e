package frontend_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/responder"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
)

// The five packages wired by hand, with no adapter between them: the image
// store is the journal's Snapshots (it halts the journal on a failed
// fsync and writes an image when a joiner needs one), and the journal is
// what heartbeat and the checkpointer need of it.
func Example_handWired() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "metatree")
	defer os.RemoveAll(dir)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr, token := ln.Addr().String(), "secret"

	tree := catalog.New()
	registry := cancel.New(cancel.Config{})
	defer registry.Close()
	images, err := image.Open(image.Config{Dir: dir, State: tree, Token: token})
	if err != nil {
		panic(err)
	}
	defer images.Close()
	j, err := journal.Open(ctx, journal.Config{ID: 1, Dir: dir, Addr: addr, Bootstrap: true, Token: token,
		StateMachine: tree, Snapshots: images})
	if err != nil {
		panic(err)
	}
	defer j.Close()
	ckpt, err := image.NewCheckpointer(image.CheckpointerConfig{Store: images, Journal: journal.ImageLogOf(j),
		Applied: func() uint64 { return j.Status().Applied }, NewState: func() image.State { return catalog.New() }})
	if err != nil {
		panic(err)
	}
	defer ckpt.Close()
	members, err := heartbeat.New(heartbeat.Config{ID: 1, Epoch: epoch.New(), Cluster: j.Status().ClusterID,
		Token: token, Tree: tree, Journal: j, OnEvent: func(ev epoch.Event) { registry.Apply(ev) }})
	if err != nil {
		panic(err)
	}
	defer members.Close()

	mux := http.NewServeMux()
	mux.Handle("/raft/", j.Handler())
	mux.Handle(image.PathPrefix, images.Handler())
	mux.Handle(responder.Path, members.Handler())
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Shutdown(ctx) // deferred last: runs first, then the parts in reverse
	// Register this frontend once (a restart finds its record): workers
	// refuse fragments from a coordinator they do not know.
	if _, ok := members.Member(1); !ok {
		if err := members.Add(ctx, heartbeat.Member{ID: 1, Addr: addr, Kind: epoch.KindFrontend, Role: journal.Follower.String()}); err != nil {
			panic(err)
		}
	}

	b := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/db", Kind: "database"}}}
	// Encode writes the oldest batch format that carries b, which every
	// member reads (frontend.BatchVersion maps a cluster version to the
	// newest one).
	data, _ := b.Encode()
	_, v, err := j.Propose(ctx, data)
	if err != nil {
		panic(err)
	}
	_, ok := tree.Get("/db")
	fmt.Println(v.(*catalog.Result).Err, ok)
	// Output: <nil> true
}
