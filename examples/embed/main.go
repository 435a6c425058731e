package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/heartbeat/epoch"
)

func main() {
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	dir, err := os.MkdirTemp("", "metatree-embed-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	if err := run(ctx, dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

// Table is the service's own type for a table, kept in a node's
// attributes through its struct tags.
type Table struct {
	Buckets int64  `catalog:"buckets"`
	Owner   string `catalog:"owner"`
}

// run is the whole control plane; the lines between "wiring" and "end of
// the wiring" are all a service needs to start a cluster and write.
func run(ctx context.Context, dir string, out io.Writer) error {
	addrs, err := freeAddrs(3)
	if err != nil {
		return err
	}
	// wiring
	token := rand.Text() // the cluster's join token: a credential, or Start refuses
	fes := make([]*frontend.Frontend, 3)
	start := func(i int) error {
		cfg := frontend.Config{ID: uint64(i + 1), Dir: filepath.Join(dir, fmt.Sprint(i+1)), Addr: addrs[i],
			Token: token, Bootstrap: i == 0, HeartbeatInterval: 100 * time.Millisecond}
		if i > 0 {
			cfg.Join = addrs[0] // a restart from the data dir ignores it
		}
		f, err := frontend.Start(ctx, cfg)
		if err == nil {
			fes[i] = f // a failed restart keeps the closed one: closing it again does nothing
		}
		return err
	}
	for i := range fes {
		if err := start(i); err != nil {
			return err
		}
		defer func() { fes[i].Close() }() // whichever runs at i when run returns
	}
	// end of the wiring

	// A watch on frontend 3, then a typed write with a precondition
	// (the table must not exist) through frontend 2.
	w := fes[2].Tree().Watch(catalog.WatchOptions{Prefix: "/orders"})
	defer w.Close()
	orders := Table{Buckets: 16, Owner: "sales"}
	set, err := catalog.Attrs(orders)
	if err != nil {
		return err
	}
	res, err := fes[1].Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/orders",
		Kind: "table", Set: set, Cond: catalog.Cond{Absent: true}}}})
	if err != nil {
		return fmt.Errorf("write: %w", err)
	}
	ev, err := w.Next(ctx)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	fmt.Fprintf(out, "watch: %s %s at index %d\n", ev.Op, ev.After.Path, ev.Index)
	if _, err := fes[1].Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/orders",
		Kind: "table", Cond: catalog.Cond{Absent: true}}}}); !errors.Is(err, catalog.ErrConflict) {
		return fmt.Errorf("a second create under the precondition: %v, want catalog.ErrConflict", err)
	}

	// A linearizable read on frontend 3: the barrier, then the tree.
	if err := fes[2].Journal().ReadBarrier(ctx); err != nil {
		return err
	}
	n, ok := fes[2].Tree().Get("/orders")
	var got Table
	if err := n.Decode(&got); !ok || err != nil || got != orders {
		return fmt.Errorf("frontend 3 reads %+v (found %v, %v), want %+v", got, ok, err, orders)
	}
	fmt.Fprintf(out, "read: %s %+v, written at index %d\n", n.Path, got, res.Index)

	// A query coordinated by frontend 1 that runs on frontend 3, against
	// the epoch the cluster has recorded for it; frontend 3 restarts (a new
	// epoch), and the query's context is cancelled.
	epoch3, err := publishedEpoch(ctx, fes[0], 3)
	if err != nil {
		return err
	}
	q, err := fes[0].Registry().Register(ctx, cancel.Member{Node: 1, Epoch: fes[0].Epoch()},
		[]cancel.Member{{Node: 3, Epoch: epoch3}})
	if err != nil {
		return err
	}
	defer q.Finish()
	if err := fes[2].Close(); err != nil {
		return err
	}
	if err := start(2); err != nil {
		return err
	}
	select {
	case <-q.Context().Done():
		fmt.Fprintf(out, "query: %v\n", context.Cause(q.Context()))
	case <-ctx.Done():
		return fmt.Errorf("the query outlived the restart: %w", ctx.Err())
	}
	return nil
}

// publishedEpoch waits until member id's record, as f has applied it,
// carries the epoch id answered the leader's heartbeats with, and returns
// it. A query registers against that epoch: the registry cancels it when
// the record moves on, and it cannot tell an epoch it has never seen from
// a newer one.
func publishedEpoch(ctx context.Context, f *frontend.Frontend, id uint64) (epoch.Epoch, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if m, ok := f.Members().Member(id); ok && !m.Epoch.IsZero() {
			return m.PublishedEpoch(), nil
		}
		select {
		case <-ctx.Done():
			return epoch.Epoch{}, fmt.Errorf("member %d's epoch: %w", id, ctx.Err())
		case <-tick.C:
		}
	}
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago.
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	return addrs, nil
}
