package frontendtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/metatree/metatree/cancel"
)

// ErrNotRunning is the error of StartQuery for a coordinator frontend or
// a worker that is stopped or was never started.
var ErrNotRunning = errors.New("frontendtest: not running")

// Query is one query as a coordinator frontend and its workers hold it:
// the coordinator's part in that frontend's cancel registry, with the
// workers as participants, and a fragment in each worker's registry, with
// the coordinator as its participant. A restart, death or removal of any
// of them cancels the parts that depend on it. Safe for concurrent use.
type Query struct {
	coordinator *cancel.Query
	fragments   map[uint64]*cancel.Query
}

// StartQuery registers a query coordinated by frontend i with a fragment
// on each of workers, as a coordinator and its workers do: the coordinator
// registers the query against the workers' epochs, then each worker
// registers its fragment against the coordinator's epoch (retrying while
// the worker has not yet heard of the coordinator, cancel.ErrUnknownNode,
// as a worker's 503 makes a coordinator retry). A participant already
// superseded fails the start with its *cancel.CanceledError, and a
// removed coordinator with Frontend.CanCoordinate's journal.ErrRemoved,
// as the frontend's POST /v1/queries refuses. ctx
// bounds the start only: the query lives until Finish or a cancellation.
func (c *Cluster) StartQuery(ctx context.Context, i int, workers ...uint64) (*Query, error) {
	f := c.Frontend(i)
	if f == nil {
		return nil, fmt.Errorf("%w: frontend %d", ErrNotRunning, i)
	}
	if err := f.CanCoordinate(); err != nil {
		return nil, fmt.Errorf("frontend %d: %w", i, err)
	}
	parts := make([]cancel.Member, len(workers))
	ws := make([]*Worker, len(workers))
	for k, id := range workers {
		if ws[k] = c.Worker(id); ws[k] == nil {
			return nil, fmt.Errorf("%w: worker %d", ErrNotRunning, id)
		}
		parts[k] = cancel.Member{Node: id, Epoch: ws[k].Epoch()}
	}
	coord := cancel.Member{Node: f.ID(), Epoch: f.Epoch()}
	cq, err := f.Registry().Register(context.Background(), coord, parts)
	if err != nil {
		return nil, err
	}
	q := &Query{coordinator: cq, fragments: map[uint64]*cancel.Query{}}
	for _, w := range ws {
		var fq *cancel.Query
		err := c.retry(ctx, fmt.Sprintf("register a fragment on worker %d", w.id), func() error {
			var err error
			fq, err = w.registry.RegisterFragment(context.Background(), coord)
			var ce *cancel.CanceledError
			if errors.As(err, &ce) {
				return permanent{err}
			}
			return err
		})
		if err != nil {
			q.Finish()
			return nil, err
		}
		q.fragments[w.id] = fq
	}
	return q, nil
}

// Context is the coordinator's context: cancelled, with a
// *cancel.CanceledError cause (context.Cause), when the coordinator or any
// of the query's workers restarts, dies or is removed.
func (q *Query) Context() context.Context { return q.coordinator.Context() }

// Fragment is the context of the query's fragment on worker id (nil if
// the query has none there): cancelled when the coordinator restarts, dies
// or is removed, or when the worker stops (cancel.ErrClosed).
func (q *Query) Fragment(id uint64) context.Context {
	if fq := q.fragments[id]; fq != nil {
		return fq.Context()
	}
	return nil
}

// Finish ends the query everywhere. It is idempotent.
func (q *Query) Finish() {
	q.coordinator.Finish()
	for _, fq := range q.fragments {
		fq.Finish()
	}
}
