package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
)

// metatreeNode is one member: a catalog replicated by a journal whose raft
// traffic crosses real HTTP on 127.0.0.1, as the example binaries run it.
type metatreeNode struct {
	j    *journal.Journal
	tree *catalog.Tree
	srv  *http.Server
	done chan struct{} // closed when srv.Serve returns
}

type metatreeCluster struct {
	nodes            []*metatreeNode
	leader, follower *metatreeNode
}

// kvPath is the catalog node that holds key's value.
func kvPath(key string) string { return "/kv/" + key }

func startMetatree(ctx context.Context, dir string) (cluster, error) {
	c := &metatreeCluster{}
	var first string
	for id := uint64(1); id <= 3; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(err, c.close())
		}
		n := &metatreeNode{tree: catalog.New(), done: make(chan struct{})}
		cfg := journal.Config{
			ID:           id,
			Dir:          filepath.Join(dir, fmt.Sprintf("n%d", id)),
			Addr:         ln.Addr().String(),
			StateMachine: n.tree,
		}
		if id == 1 {
			cfg.Bootstrap = true
			first = cfg.Addr
		} else {
			cfg.Join = first
		}
		// The journal's handler is only known after Open, and Open of a
		// joining node needs its peers to reach it: serve through a mux
		// that gets the handler once it exists.
		mux := &lateHandler{ready: make(chan struct{})}
		n.srv = &http.Server{Handler: mux}
		go func() { defer close(n.done); _ = n.srv.Serve(ln) }()
		c.nodes = append(c.nodes, n)
		openCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
		n.j, err = journal.Open(openCtx, cfg)
		cancel()
		if err != nil {
			return nil, errors.Join(fmt.Errorf("open node %d: %w", id, err), c.close())
		}
		mux.set(n.j.Handler())
		// Every member follows one leader before the next joins.
		if err := waitFor(ctx, 60*time.Second, c.agreed); err != nil {
			return nil, errors.Join(err, c.close())
		}
	}
	for _, n := range c.nodes {
		if n.j.Status().IsLeader() {
			c.leader = n
		} else if c.follower == nil {
			c.follower = n
		}
	}
	if c.leader == nil || c.follower == nil {
		return nil, errors.Join(errNotReady, c.close())
	}
	if err := c.propose(ctx, catalog.Op{Type: catalog.OpCreate, Path: "/kv", Kind: "dir"}); err != nil {
		return nil, errors.Join(err, c.close())
	}
	return c, nil
}

// agreed reports whether every open member follows the same leader, and
// that leader knows it leads.
func (c *metatreeCluster) agreed() bool {
	var leader uint64
	for _, n := range c.nodes {
		if n.j == nil {
			continue
		}
		st := n.j.Status()
		if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return false
		}
		leader = st.Leader
	}
	return leader != 0 && int(leader) <= len(c.nodes) && c.nodes[leader-1].j.Status().IsLeader()
}

func (c *metatreeCluster) propose(ctx context.Context, op catalog.Op) error {
	data, err := catalog.Batch{Ops: []catalog.Op{op}}.Encode()
	if err != nil {
		return err
	}
	_, v, err := c.leader.j.Propose(ctx, data)
	if err != nil {
		return err
	}
	if res, ok := v.(*catalog.Result); ok && res.Err != nil {
		return res.Err
	}
	return nil
}

func (c *metatreeCluster) write(ctx context.Context, key string, val []byte, first bool) error {
	op := catalog.Op{Type: catalog.OpUpdate, Path: kvPath(key), Set: map[string]catalog.Value{"v": catalog.Bytes(val)}}
	if first {
		op.Type, op.Kind = catalog.OpCreate, "kv"
	}
	return c.propose(ctx, op)
}

func (c *metatreeCluster) read(ctx context.Context, key string) error {
	if err := c.follower.j.ReadBarrier(ctx); err != nil {
		return err
	}
	if _, ok := c.follower.tree.Get(kvPath(key)); !ok {
		return fmt.Errorf("read %s: not found after the barrier", key)
	}
	return nil
}

func (c *metatreeCluster) readVia() string { return "follower" }

func (c *metatreeCluster) close() error {
	var errs []error
	for _, n := range c.nodes {
		if n.j != nil {
			errs = append(errs, n.j.Close())
		}
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, n.srv.Shutdown(shutdown))
		cancel()
		<-n.done
	}
	return errors.Join(errs...)
}

// lateHandler answers 503 until set gives it the handler to serve with.
type lateHandler struct {
	ready chan struct{}
	h     http.Handler
}

func (l *lateHandler) set(h http.Handler) { l.h = h; close(l.ready) }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-l.ready:
		l.h.ServeHTTP(w, r)
	default:
		// Answer without reading a streaming body: needs full duplex.
		_ = http.NewResponseController(w).EnableFullDuplex()
		http.Error(w, "starting", http.StatusServiceUnavailable)
	}
}
