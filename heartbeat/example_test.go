package heartbeat_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/responder"
)

// memJournal stands in for *journal.Journal (which satisfies Journal
// itself) in this example: it applies each proposal to the one catalog at
// once.
type memJournal struct {
	mu    sync.Mutex
	index uint64
	tree  *catalog.Tree
}

func (j *memJournal) Propose(_ context.Context, data []byte) (uint64, any, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.index++
	return j.index, j.tree.Apply(j.index, data), nil
}

func (j *memJournal) LeaderTerm() (uint64, bool) { return 1, true }

// handlers routes heartbeats to in-process handlers by host.
type handlers struct{ m sync.Map }

func (h *handlers) RoundTrip(req *http.Request) (*http.Response, error) {
	v, ok := h.m.Load(req.URL.Host)
	if !ok {
		return nil, errors.New("connection refused")
	}
	w := httptest.NewRecorder()
	v.(http.Handler).ServeHTTP(w, req)
	return w.Result(), nil
}

// Example wires one frontend (the leader) and one worker: the frontend's
// membership feeds a cancel registry; when the worker restarts, the query
// running on it is cancelled with a typed cause.
func Example() {
	tree := catalog.New()
	reg := cancel.New(cancel.Config{})
	defer reg.Close()
	net := &handlers{}

	var workerUp atomic.Bool
	up := make(chan struct{})
	ms, err := heartbeat.New(heartbeat.Config{
		ID: 1, Epoch: epoch.New(), Tree: tree, Journal: &memJournal{tree: tree},
		Client:   &http.Client{Transport: net},
		Interval: 10 * time.Millisecond,
		OnEvent: func(ev epoch.Event) {
			reg.Apply(ev) // the registry learns every transition, in log order
			if ev.Node == 7 && ev.Type == epoch.Alive && workerUp.CompareAndSwap(false, true) {
				close(up)
			}
		},
	})
	if err != nil {
		panic(err)
	}
	defer ms.Close()
	net.m.Store("fe1:80", ms.Handler())

	// The worker process: a Responder mounted at responder.Path.
	worker, _ := responder.New(responder.Config{ID: 7, Epoch: epoch.New()})
	net.m.Store("w7:80", worker)

	ctx := context.Background()
	_ = ms.Add(ctx, heartbeat.Member{ID: 1, Addr: "fe1:80", Kind: epoch.KindFrontend})
	_ = ms.Add(ctx, heartbeat.Member{ID: 7, Addr: "w7:80", Kind: epoch.KindWorker})
	<-up // the worker answered and its epoch is journaled

	// A query coordinated here with a fragment on worker 7, at its epoch.
	w7, _ := reg.Node(7)
	q, err := reg.Register(ctx, cancel.Member{Node: 1}, []cancel.Member{{Node: 7, Epoch: w7.Epoch}})
	if err != nil {
		panic(err)
	}
	defer q.Finish()

	// Worker 7 restarts: a new process, a new epoch, the same address.
	restarted, _ := responder.New(responder.Config{ID: 7, Epoch: epoch.New()})
	net.m.Store("w7:80", restarted)

	<-q.Context().Done()
	var ce *cancel.CanceledError
	errors.As(context.Cause(q.Context()), &ce)
	fmt.Println("node", ce.Node, ce.Reason, errors.Is(ce, cancel.ErrNodeRestarted), ce.NewEpoch == restarted.Epoch())
	// Output:
	// node 7 restarted true true
}
