package journal_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
)

// A single-node cluster: bootstrap, write, read your write. The state
// machine is a catalog.Tree, and what is proposed is a catalog.Batch
// encoded in the cluster's format version: the tree refuses any other
// bytes before they reach the log (journal.ProposalChecker). A real node also mounts j.Handler()
// under /raft/ on the server listening at Addr, and its peers join it
// with Config.Join.
func ExampleOpen() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tree := catalog.New()
	j, err := journal.Open(ctx, journal.Config{
		ID:           1,
		Dir:          "/node1",
		Addr:         "127.0.0.1:7001",
		Bootstrap:    true,
		StateMachine: tree,
		FS:           vfs.NewMem(), // tests only; the default is the disk
		TickInterval: 10 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()

	// Encode writes the oldest batch format that carries the batch, which
	// every member reads during a rolling upgrade; a batch that needs a
	// newer format (an owner, a match) is encoded with EncodeVersion in the
	// format the cluster's version allows (examples/frontend.BatchVersion).
	b := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/hello", Kind: "greeting",
		Set: map[string]catalog.Value{"text": catalog.String("world")}}}}
	data, err := b.Encode()
	if err != nil {
		log.Fatal(err)
	}
	_, value, err := j.Propose(ctx, data)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("batch error:", value.(*catalog.Result).Err)
	n, _ := tree.Get("/hello")
	fmt.Println(n.Path, n.Kind, n.Attrs["text"])

	_, _, err = j.Propose(ctx, []byte("hello")) // not a batch
	fmt.Println(err)
	fmt.Println(j.Status().Role, j.Status().IsLeader(), j.CheckFresh() == nil)
	// Output:
	// batch error: <nil>
	// /hello greeting world
	// journal: propose: invalid proposal: catalog: unknown format version: batch version 104 (this code reads 1 to 4)
	// follower true true
}
