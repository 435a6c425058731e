package journaltest_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// exampleTB stands in for the *testing.T a real test passes.
type exampleTB struct {
	cleanups []func()
	dirs     []string
}

func (*exampleTB) Helper()                        {}
func (e *exampleTB) Cleanup(f func())             { e.cleanups = append(e.cleanups, f) }
func (*exampleTB) Errorf(format string, a ...any) { log.Printf(format, a...) }
func (*exampleTB) Fatalf(format string, a ...any) { log.Fatalf(format, a...) }
func (e *exampleTB) TempDir() string {
	d, err := os.MkdirTemp("", "journaltest")
	if err != nil {
		log.Fatal(err)
	}
	e.dirs = append(e.dirs, d)
	return d
}

func (e *exampleTB) done() {
	for _, f := range slices.Backward(e.cleanups) {
		f()
	}
	for _, d := range e.dirs {
		os.RemoveAll(d)
	}
}

// A test starts an in-memory cluster of catalog trees, writes a batch
// through a follower, cuts the leader off and sees the others elect a new
// one.
func ExampleNewCluster() {
	tb := &exampleTB{} // in a real test: the *testing.T
	defer tb.done()
	c := journaltest.NewCluster(tb, journaltest.Options{
		Voters:          3,
		NewStateMachine: func(uint64) journal.StateMachine { return catalog.New() },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	leader, _ := c.WaitLeader(ctx)
	follower := c.Node(leader%3 + 1)
	// The batch in the oldest format that carries it, which every member
	// reads (examples/frontend.BatchVersion maps a cluster version to the
	// newest format a batch may use).
	b := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/hello", Kind: "greeting"}}}
	data, err := b.Encode()
	if err != nil {
		log.Fatal(err)
	}
	_, value, err := follower.Journal().Propose(ctx, data)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("batch error:", value.(*catalog.Result).Err)
	n, _ := follower.StateMachine().(*catalog.Tree).Get("/hello")
	fmt.Println(n.Path, n.Kind)

	c.Net.Isolate(leader)
	newLeader, _ := c.WaitNewLeader(ctx, leader)
	fmt.Println("new leader elected:", newLeader != leader)
	// Output:
	// batch error: <nil>
	// /hello greeting
	// new leader elected: true
}
