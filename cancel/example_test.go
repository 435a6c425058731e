package cancel_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat/epoch"
)

func Example() {
	reg := cancel.New(cancel.Config{})
	defer reg.Close()

	coordinator, worker := epoch.New(), epoch.New()
	// Membership events (from heartbeat.Membership on a frontend).
	reg.Apply(epoch.Event{Index: 1, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: coordinator})
	reg.Apply(epoch.Event{Index: 2, Node: 7, Kind: epoch.KindWorker, Type: epoch.Added, NewEpoch: worker})

	q, err := reg.Register(context.Background(), cancel.Member{Node: 1, Epoch: coordinator},
		[]cancel.Member{{Node: 7, Epoch: worker}})
	if err != nil {
		panic(err)
	}
	defer q.Finish()

	// Worker 7 answers the leader's heartbeat with a new epoch.
	reg.Apply(epoch.Event{Index: 3, Node: 7, Kind: epoch.KindWorker, Type: epoch.Restarted,
		OldEpoch: worker, NewEpoch: epoch.New()})

	<-q.Context().Done()
	cause := context.Cause(q.Context())
	var ce *cancel.CanceledError
	fmt.Println(errors.Is(cause, cancel.ErrNodeRestarted), errors.As(cause, &ce), ce.Node, ce.Reason)

	// A late fragment against the old epoch is refused at once.
	_, err = reg.Register(context.Background(), cancel.Member{Node: 1, Epoch: coordinator},
		[]cancel.Member{{Node: 7, Epoch: worker}})
	fmt.Println(errors.Is(err, cancel.ErrNodeRestarted))
	// Output:
	// true true 7 restarted
	// true
}
