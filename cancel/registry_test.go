package cancel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/heartbeattest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster sets up a registry that knows coordinator 1 and workers 10..12.
func cluster(t *testing.T) (*Registry, map[uint64]epoch.Epoch) {
	t.Helper()
	r := New(Config{})
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	epochs := map[uint64]epoch.Epoch{}
	idx := uint64(0)
	for _, id := range []uint64{1, 10, 11, 12} {
		kind := epoch.KindWorker
		if id == 1 {
			kind = epoch.KindFrontend
		}
		epochs[id] = epoch.New()
		idx++
		r.Apply(epoch.Event{Index: idx, Node: id, Kind: kind, Type: epoch.Added, NewEpoch: epochs[id], Generation: 1})
	}
	return r, epochs
}

func m(id uint64, e epoch.Epoch) Member { return Member{Node: id, Epoch: e} }

func requireCause(t *testing.T, q *Query, sentinel error, node uint64) *CanceledError {
	t.Helper()
	require.Error(t, q.Context().Err(), "query not cancelled")
	var ce *CanceledError
	require.ErrorAs(t, context.Cause(q.Context()), &ce)
	require.ErrorIs(t, ce, sentinel)
	require.Equal(t, node, ce.Node)
	return ce
}

func TestEventsCancelAffectedQueriesOnly(t *testing.T) {
	for _, tc := range []struct {
		name     string
		typ      epoch.EventType
		sentinel error
		reason   Reason
	}{
		{"restarted", epoch.Restarted, ErrNodeRestarted, Restarted},
		{"dead", epoch.Dead, ErrNodeDead, Dead},
		{"removed", epoch.Removed, ErrNodeRemoved, Removed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ep := cluster(t)
			onTen, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10]), m(11, ep[11])})
			require.NoError(t, err)
			elsewhere, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(11, ep[11]), m(12, ep[12])})
			require.NoError(t, err)
			fragment, err := r.RegisterFragment(t.Context(), m(10, ep[10]))
			require.NoError(t, err)

			newEpoch := epoch.New()
			if tc.typ == epoch.Dead {
				newEpoch = heartbeattest.TemporaryEpoch(ep[10], 2)
			}
			if tc.typ == epoch.Removed {
				newEpoch = epoch.Epoch{}
			}
			n := r.Apply(epoch.Event{Index: 100, Node: 10, Kind: epoch.KindWorker, Type: tc.typ, OldEpoch: ep[10], NewEpoch: newEpoch, Generation: 2})
			require.Equal(t, 2, n)

			ce := requireCause(t, onTen, tc.sentinel, 10)
			require.Equal(t, ep[10], ce.OldEpoch)
			require.Equal(t, newEpoch, ce.NewEpoch)
			require.Equal(t, tc.reason, ce.Reason)
			require.Equal(t, uint64(100), ce.Index)
			requireCause(t, fragment, tc.sentinel, 10)
			require.NoError(t, elsewhere.Context().Err(), "a query not on node 10 was cancelled")
			require.Equal(t, 1, r.Stats().Live)

			// Registering against the superseded epoch now fails at once.
			_, err = r.Register(t.Context(), m(1, ep[1]), []Member{m(12, ep[12]), m(10, ep[10])})
			var rerr *CanceledError
			require.ErrorAs(t, err, &rerr)
			require.ErrorIs(t, err, tc.sentinel)
			require.Equal(t, uint64(10), rerr.Node)
			require.Equal(t, 1, r.Stats().Live, "a failed registration left something behind")

			if tc.typ == epoch.Restarted {
				// ...while the new epoch is fine, and survives a replay of the event.
				q, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, newEpoch)})
				require.NoError(t, err)
				require.Zero(t, r.Apply(epoch.Event{Index: 100, Node: 10, Type: epoch.Restarted, OldEpoch: ep[10], NewEpoch: newEpoch}))
				require.NoError(t, q.Context().Err())
			}
		})
	}
}

func TestRestartKeepsQueriesOnTheNewEpoch(t *testing.T) {
	r, ep := cluster(t)
	newer := epoch.New()
	// The caller learned the new epoch before the registry did: accepted,
	// and not cancelled by the restart event that follows.
	early, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, newer)})
	require.NoError(t, err)
	old, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10])})
	require.NoError(t, err)
	require.Equal(t, 1, r.Apply(epoch.Event{Index: 50, Node: 10, Type: epoch.Restarted, OldEpoch: ep[10], NewEpoch: newer}))
	require.NoError(t, early.Context().Err())
	requireCause(t, old, ErrNodeRestarted, 10)
	st, ok := r.Node(10)
	require.True(t, ok)
	require.Equal(t, newer, st.Epoch)
	require.Equal(t, StatusAlive, st.Status)
	require.Equal(t, 1, st.Live)
}

func TestZeroEpochMeansCurrent(t *testing.T) {
	r, ep := cluster(t)
	q, err := r.Register(t.Context(), Member{Node: 1}, []Member{{Node: 10}})
	require.NoError(t, err)
	r.Apply(epoch.Event{Index: 50, Node: 10, Type: epoch.Restarted, OldEpoch: ep[10], NewEpoch: epoch.New()})
	ce := requireCause(t, q, ErrNodeRestarted, 10)
	require.Equal(t, ep[10], ce.OldEpoch)
}

func TestDeadThenAliveAcceptsTheSameEpochAgain(t *testing.T) {
	r, ep := cluster(t)
	tmp := heartbeattest.TemporaryEpoch(ep[10], 2)
	r.Apply(epoch.Event{Index: 50, Node: 10, Type: epoch.Dead, OldEpoch: ep[10], NewEpoch: tmp})
	_, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10])})
	require.ErrorIs(t, err, ErrNodeDead)
	r.Apply(epoch.Event{Index: 51, Node: 10, Type: epoch.Alive, OldEpoch: tmp, NewEpoch: ep[10]})
	q, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10])})
	require.NoError(t, err)
	require.NoError(t, q.Context().Err())
	q.Finish()
}

func TestRemovedThenReAdded(t *testing.T) {
	r, ep := cluster(t)
	r.Apply(epoch.Event{Index: 50, Node: 10, Type: epoch.Removed, OldEpoch: ep[10]})
	_, err := r.Register(t.Context(), m(1, ep[1]), []Member{{Node: 10, Epoch: epoch.New()}})
	require.ErrorIs(t, err, ErrNodeRemoved, "a removed member takes no work, whatever the epoch")
	e2 := epoch.New()
	r.Apply(epoch.Event{Index: 60, Node: 10, Type: epoch.Added, NewEpoch: e2})
	_, err = r.Register(t.Context(), m(1, ep[1]), []Member{m(10, e2)})
	require.NoError(t, err)
	require.Zero(t, r.Stats().Removed)
}

func TestFinish(t *testing.T) {
	r, ep := cluster(t)
	var called atomic.Int32
	q, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10])}, OnCancel(func(*CanceledError) { called.Add(1) }))
	require.NoError(t, err)
	require.Equal(t, 1, r.Stats().Live)
	q.Finish()
	q.Finish()
	require.Zero(t, r.Stats().Live)
	require.ErrorIs(t, context.Cause(q.Context()), context.Canceled)
	require.Zero(t, r.Apply(epoch.Event{Index: 50, Node: 10, Type: epoch.Dead, OldEpoch: ep[10]}))
	require.NoError(t, r.Close())
	require.Zero(t, called.Load(), "a finished query's callback ran")
}

func TestCancelledOnceFirstReasonWins(t *testing.T) {
	r, ep := cluster(t)
	var calls atomic.Int32
	var got atomic.Pointer[CanceledError]
	q, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10]), m(11, ep[11])},
		OnCancel(func(c *CanceledError) { calls.Add(1); got.Store(c) }))
	require.NoError(t, err)
	require.Equal(t, 1, r.Apply(epoch.Event{Index: 50, Node: 11, Type: epoch.Dead, OldEpoch: ep[11]}))
	require.Equal(t, 0, r.Apply(epoch.Event{Index: 51, Node: 10, Type: epoch.Restarted, OldEpoch: ep[10], NewEpoch: epoch.New()}))
	require.Equal(t, 0, r.Apply(epoch.Event{Index: 52, Node: 1, Type: epoch.Removed, OldEpoch: ep[1]}))
	require.NoError(t, r.Close()) // waits for callbacks
	require.Equal(t, int32(1), calls.Load())
	require.ErrorIs(t, got.Load(), ErrNodeDead)
	requireCause(t, q, ErrNodeDead, 11)
	require.Equal(t, uint64(1), r.Stats().Cancelled)
}

func TestCallbacksAreIsolated(t *testing.T) {
	r, ep := cluster(t)
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // runs before cluster's Close, which waits for callbacks
	var done sync.WaitGroup
	var ran atomic.Int32
	// One callback blocks, one panics, the rest must still run, and Apply
	// must return without waiting for any of them.
	_, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10])}, OnCancel(func(*CanceledError) { <-release }))
	require.NoError(t, err)
	_, err = r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10])}, OnCancel(func(*CanceledError) { panic("boom") }))
	require.NoError(t, err)
	for range 10 {
		done.Add(1)
		_, err = r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10])}, OnCancel(func(*CanceledError) { ran.Add(1); done.Done() }))
		require.NoError(t, err)
	}
	require.Equal(t, 12, r.Apply(epoch.Event{Index: 50, Node: 10, Type: epoch.Dead, OldEpoch: ep[10]}))
	done.Wait() // the ten ran although one callback is still blocked
	require.Equal(t, int32(10), ran.Load())
	// The registry keeps working while the slow callback runs.
	q, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(11, ep[11])})
	require.NoError(t, err)
	require.Equal(t, 1, r.Apply(epoch.Event{Index: 51, Node: 11, Type: epoch.Removed, OldEpoch: ep[11]}))
	requireCause(t, q, ErrNodeRemoved, 11)
	// The panicking callback finishes on its own goroutine; then only the
	// blocked one is running.
	require.Eventually(t, func() bool { return r.Stats().Callbacks == 1 }, 10*time.Second, time.Millisecond)
	unblock()
	require.NoError(t, r.Close())
	require.Zero(t, r.Stats().Callbacks)
}

// TestRegistrationRacingEvent: many goroutines register against a worker's
// epoch while the worker restarts. Every registration either fails with the
// restart cause or is cancelled by it, exactly once.
func TestRegistrationRacingEvent(t *testing.T) {
	for round := range 20 {
		r, ep := cluster(t)
		var cancels atomic.Int32
		var mu sync.Mutex
		var accepted []*Query
		var rejected int
		var wg sync.WaitGroup
		start := make(chan struct{})
		const n = 200
		for i := range n {
			wg.Go(func() {
				<-start
				q, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10]), m(11, ep[11])},
					OnCancel(func(*CanceledError) { cancels.Add(1) }))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if !errors.Is(err, ErrNodeRestarted) {
						t.Errorf("goroutine %d: %v", i, err)
					}
					rejected++
					return
				}
				accepted = append(accepted, q)
			})
		}
		newer := epoch.New()
		close(start)
		r.Apply(epoch.Event{Index: 50, Node: 10, Type: epoch.Restarted, OldEpoch: ep[10], NewEpoch: newer})
		wg.Wait()
		// A duplicate delivery and a later event on the same node cancel nothing more.
		r.Apply(epoch.Event{Index: 50, Node: 10, Type: epoch.Restarted, OldEpoch: ep[10], NewEpoch: newer})
		r.Apply(epoch.Event{Index: 51, Node: 10, Type: epoch.Dead, OldEpoch: newer})
		require.NoError(t, r.Close())
		require.Equal(t, n, len(accepted)+rejected, "round %d", round)
		for _, q := range accepted {
			requireCause(t, q, ErrNodeRestarted, 10)
		}
		require.Equal(t, int32(len(accepted)), cancels.Load(), "round %d: a query was cancelled twice or not at all", round)
	}
}

func TestMemoryBoundedByLiveQueries(t *testing.T) {
	r, ep := cluster(t)
	qs := make([]*Query, 0, 10000)
	for range 10000 {
		q, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10]), m(11, ep[11]), m(12, ep[12])})
		require.NoError(t, err)
		qs = append(qs, q)
	}
	for _, q := range qs {
		q.Finish()
	}
	require.Zero(t, r.Stats().Live)
	r.mu.Lock()
	for _, n := range r.mu.nodes {
		if n != nil {
			require.LessOrEqual(t, cap(n.queries), 64, "node %d keeps an index of %d slots for no query", n.id, cap(n.queries))
		}
	}
	r.mu.Unlock()

	// Removed members are remembered up to MaxRemoved.
	small := New(Config{MaxRemoved: 3})
	defer small.Close()
	for id := range uint64(10) {
		small.Apply(epoch.Event{Index: id + 1, Node: 100 + id, Type: epoch.Added, NewEpoch: epoch.New()})
		small.Apply(epoch.Event{Index: id + 1000, Node: 100 + id, Type: epoch.Removed})
	}
	st := small.Stats()
	require.Equal(t, 3, st.Removed)
	require.Equal(t, 3, st.Nodes)
	_, err := small.Register(t.Context(), Member{Node: 109}, nil)
	require.ErrorIs(t, err, ErrNodeRemoved)
}

func TestCloseCancelsLiveQueries(t *testing.T) {
	r := New(Config{})
	q, err := r.Register(t.Context(), Member{Node: 1}, []Member{{Node: 2}})
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.NoError(t, r.Close())
	require.ErrorIs(t, context.Cause(q.Context()), ErrClosed)
	_, err = r.Register(t.Context(), Member{Node: 1}, nil)
	require.ErrorIs(t, err, ErrClosed)
	q.Finish()
}

func TestConflictingEpochsRejected(t *testing.T) {
	r, ep := cluster(t)
	_, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10]), m(10, epoch.New())})
	require.ErrorIs(t, err, ErrInvalid)
	// The same node twice with the same epoch is one participant.
	q, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10]), m(10, ep[10])})
	require.NoError(t, err)
	require.Equal(t, 2, q.parts())
}

func TestManyWorkersPerQuery(t *testing.T) {
	r := New(Config{})
	defer r.Close()
	var workers []Member
	for i := range uint64(50) {
		workers = append(workers, Member{Node: 100 + i, Epoch: epoch.New()})
	}
	qs := make([]*Query, 20)
	for i := range qs {
		var err error
		qs[i], err = r.Register(t.Context(), Member{Node: 1}, workers)
		require.NoError(t, err)
	}
	for i := 0; i < len(qs); i += 2 {
		qs[i].Finish()
	}
	require.Equal(t, 10, r.Apply(epoch.Event{Index: 1, Node: 149, Type: epoch.Dead}))
	for i, q := range qs {
		if i%2 == 0 {
			require.ErrorIs(t, context.Cause(q.Context()), context.Canceled)
		} else {
			requireCause(t, q, ErrNodeDead, 149)
		}
	}
	require.Zero(t, r.Stats().Live)
	r.mu.Lock()
	for _, n := range r.mu.nodes {
		if n != nil {
			require.Empty(t, n.queries, fmt.Sprint(n.id))
		}
	}
	r.mu.Unlock()
}

func TestCanceledErrorText(t *testing.T) {
	e := &CanceledError{Node: 7, Reason: Restarted}
	require.Contains(t, e.Error(), "node 7 restarted")
	require.True(t, errors.Is(e, ErrNodeRestarted))
	require.False(t, errors.Is(e, ErrNodeDead))
}

// Registrations on nodes no event has named leave nothing behind once
// their queries are gone: the registry's memory follows the live queries,
// not every id it was ever given.
func TestUnknownNodesAreForgottenWithTheirQueries(t *testing.T) {
	r, ep := cluster(t)
	for i := range uint64(10000) {
		q, err := r.Register(t.Context(), Member{Node: 1_000_000 + i}, []Member{{Node: 2_000_000 + i}, m(10, ep[10])})
		require.NoError(t, err)
		q.Finish()
	}
	st := r.Stats()
	require.Zero(t, st.Live)
	require.Equal(t, 4, st.Nodes, "the four members of cluster, nothing else")

	// A query cancelled by an event releases its unknown nodes too.
	q, err := r.Register(t.Context(), Member{Node: 77}, []Member{m(10, ep[10])})
	require.NoError(t, err)
	require.Equal(t, 5, r.Stats().Nodes)
	r.Apply(epoch.Event{Index: 100, Node: 10, Type: epoch.Dead, OldEpoch: ep[10], NewEpoch: heartbeattest.TemporaryEpoch(ep[10], 2)})
	requireCause(t, q, ErrNodeDead, 10)
	require.Equal(t, 4, r.Stats().Nodes)
	_, ok := r.Node(77)
	require.False(t, ok)
}

// A worker refuses a fragment from a coordinator no heartbeat has named:
// no event would ever cancel it. Once named, the coordinator is accepted.
func TestFragmentFromUnknownCoordinatorRefused(t *testing.T) {
	r := New(Config{MaxRemoved: 1})
	defer r.Close()
	e := epoch.New()
	_, err := r.RegisterFragment(t.Context(), m(3, e))
	require.ErrorIs(t, err, ErrUnknownNode)
	require.Contains(t, err.Error(), "coordinator 3")
	require.Zero(t, r.Stats().Nodes)

	r.Apply(epoch.Event{Index: 1, Node: 3, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: e})
	q, err := r.RegisterFragment(t.Context(), m(3, e))
	require.NoError(t, err)
	q.Finish()

	// Removed: refused as removed while remembered, as unknown after.
	r.Apply(epoch.Event{Index: 2, Node: 3, Kind: epoch.KindFrontend, Type: epoch.Removed, OldEpoch: e})
	_, err = r.RegisterFragment(t.Context(), m(3, e))
	require.ErrorIs(t, err, ErrNodeRemoved)
	r.Apply(epoch.Event{Index: 3, Node: 4, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: epoch.New()})
	r.Apply(epoch.Event{Index: 4, Node: 4, Kind: epoch.KindFrontend, Type: epoch.Removed})
	_, err = r.RegisterFragment(t.Context(), m(3, e))
	require.ErrorIs(t, err, ErrUnknownNode)
}

// A query registered against a worker whose epoch was not known yet (a
// follower that had replayed its record before its first answer) names the
// worker's real epoch when it is cancelled, and "unknown" when no event
// ever gave one.
func TestCauseOfAQueryRegisteredBeforeTheEpochWasKnown(t *testing.T) {
	r, ep := cluster(t)
	e := epoch.New()
	r.Apply(epoch.Event{Index: 10, Node: 20, Kind: epoch.KindWorker, Type: epoch.Added})
	early, err := r.Register(t.Context(), m(1, ep[1]), []Member{{Node: 20}})
	require.NoError(t, err)
	r.Apply(epoch.Event{Index: 11, Node: 20, Kind: epoch.KindWorker, Type: epoch.Alive, NewEpoch: e, Generation: 1})
	r.Apply(epoch.Event{Index: 12, Node: 20, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e, NewEpoch: heartbeattest.TemporaryEpoch(e, 2), Generation: 2})
	ce := requireCause(t, early, ErrNodeDead, 20)
	require.Equal(t, e, ce.OldEpoch)
	require.Equal(t, fmt.Sprintf("cancel: node 20 declared dead (epoch %s)", e), ce.Error())

	// Never named before the event: the event's own old epoch.
	q, err := r.Register(t.Context(), m(1, ep[1]), []Member{{Node: 21}})
	require.NoError(t, err)
	r.Apply(epoch.Event{Index: 13, Node: 21, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e, NewEpoch: heartbeattest.TemporaryEpoch(e, 5), Generation: 5})
	require.Equal(t, e, requireCause(t, q, ErrNodeDead, 21).OldEpoch)

	// Bound to the first epoch learnt, even when the event that cancels it
	// names none (a member re-added with a new epoch).
	r.Apply(epoch.Event{Index: 15, Node: 23, Kind: epoch.KindWorker, Type: epoch.Added})
	q, err = r.Register(t.Context(), m(1, ep[1]), []Member{{Node: 23}})
	require.NoError(t, err)
	r.Apply(epoch.Event{Index: 16, Node: 23, Kind: epoch.KindWorker, Type: epoch.Alive, NewEpoch: e, Generation: 1})
	r.Apply(epoch.Event{Index: 17, Node: 23, Kind: epoch.KindWorker, Type: epoch.Added, NewEpoch: epoch.New()})
	require.Equal(t, e, requireCause(t, q, ErrNodeRestarted, 23).OldEpoch)

	// A worker declared dead before it ever answered has no epoch to name.
	q, err = r.Register(t.Context(), m(1, ep[1]), []Member{{Node: 22}})
	require.NoError(t, err)
	r.Apply(epoch.Event{Index: 18, Node: 22, Kind: epoch.KindWorker, Type: epoch.Dead, Generation: 1})
	require.Equal(t, "cancel: node 22 declared dead (epoch unknown)", requireCause(t, q, ErrNodeDead, 22).Error())
}

// An event about an older epoch of a member never cancels a part registered
// on a newer one that the registry has not heard of yet: a coordinator that
// restarted twice (E1 -> E2 -> E3) and dispatched from E3 before the worker's
// lists showed E2 keeps its fragment through Restarted(E1 -> E2) and
// Dead(E2), and loses it only when E3 itself is superseded. The frontend
// side (Register, a coordinator's own epoch ahead of its replay) holds to
// the same order.
func TestEventAboutAnOlderEpochKeepsThePartOnANewerOne(t *testing.T) {
	for _, side := range []string{"worker", "frontend"} {
		t.Run(side, func(t *testing.T) {
			r := New(Config{})
			defer r.Close()
			e1, e2, e3, e4 := epoch.New(), epoch.New(), epoch.New(), epoch.New()
			w := epoch.New()
			r.Apply(epoch.Event{Index: 1, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: e1, Generation: 1})
			r.Apply(epoch.Event{Index: 2, Node: 10, Kind: epoch.KindWorker, Type: epoch.Added, NewEpoch: w, Generation: 1})
			var q *Query
			var err error
			if side == "worker" {
				q, err = r.RegisterFragment(t.Context(), m(1, e3))
			} else {
				q, err = r.Register(t.Context(), m(1, e3), []Member{m(10, w)})
			}
			require.NoError(t, err)

			require.Zero(t, r.Apply(epoch.Event{Index: 3, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Restarted, OldEpoch: e1, NewEpoch: e2, Generation: 2}))
			require.NoError(t, q.Context().Err(), "Restarted(E1 -> E2) cancelled the part on E3")
			tmp := heartbeattest.TemporaryEpoch(e2, 3)
			require.Zero(t, r.Apply(epoch.Event{Index: 4, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Dead, OldEpoch: e2, NewEpoch: tmp, Generation: 3}))
			require.NoError(t, q.Context().Err(), "Dead(E2) cancelled the part on E3")
			require.Zero(t, r.Apply(epoch.Event{Index: 5, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Restarted, OldEpoch: tmp, NewEpoch: e3, Generation: 4}))
			require.NoError(t, q.Context().Err())
			st, ok := r.Node(1)
			require.True(t, ok)
			require.Equal(t, e3, st.Epoch)

			// Superseded epochs are refused; the newest is still accepted.
			for _, old := range []epoch.Epoch{e1, e2} {
				_, err := r.RegisterFragment(t.Context(), m(1, old))
				require.ErrorIs(t, err, ErrNodeRestarted)
			}
			require.Equal(t, 1, r.Apply(epoch.Event{Index: 6, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Restarted, OldEpoch: e3, NewEpoch: e4, Generation: 5}))
			ce := requireCause(t, q, ErrNodeRestarted, 1)
			require.Equal(t, e3, ce.OldEpoch)
			require.Equal(t, e4, ce.NewEpoch)
		})
	}
}

// A part on an epoch no event has named yet is cancelled when an event
// skips generations that could hide that epoch's end: a transition to
// another epoch two generations on (the part's epoch may have come and
// gone in between), or to the part's own epoch three generations on (it
// may have died and come back in between, the worker that missed lists
// seeing Restarted(zero -> E1)).
func TestPartOnAnUnnamedEpochCancelledWhenAnEventMayHideItsEnd(t *testing.T) {
	t.Run("superseded in the gap", func(t *testing.T) {
		r := New(Config{})
		defer r.Close()
		e1, e2, e3 := epoch.New(), epoch.New(), epoch.New()
		r.Apply(epoch.Event{Index: 1, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: e1, Generation: 1})
		q, err := r.RegisterFragment(t.Context(), m(1, e2))
		require.NoError(t, err)
		require.Equal(t, 1, r.Apply(epoch.Event{Index: 2, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Restarted, OldEpoch: e1, NewEpoch: e3, Generation: 3}))
		ce := requireCause(t, q, ErrNodeRestarted, 1)
		require.Equal(t, e2, ce.OldEpoch)
		require.Equal(t, e3, ce.NewEpoch)
	})
	t.Run("died in the gap from no epoch", func(t *testing.T) {
		r := New(Config{})
		defer r.Close()
		e1 := epoch.New()
		r.Apply(epoch.Event{Index: 1, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Added})
		q, err := r.RegisterFragment(t.Context(), m(1, e1))
		require.NoError(t, err)
		// Answered with E1 (gen 1), declared dead (gen 2), back with E1
		// (gen 3): the worker's next list shows only gen 3.
		require.Equal(t, 1, r.Apply(epoch.Event{Index: 2, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Restarted, NewEpoch: e1, Generation: 3}))
		ce := requireCause(t, q, ErrNodeDead, 1)
		require.Equal(t, e1, ce.OldEpoch)
		// Registered after that event, E1 is the current epoch: accepted.
		q, err = r.RegisterFragment(t.Context(), m(1, e1))
		require.NoError(t, err)
		q.Finish()
	})
	t.Run("no room for a death", func(t *testing.T) {
		r := New(Config{})
		defer r.Close()
		e1 := epoch.New()
		r.Apply(epoch.Event{Index: 1, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Added})
		q, err := r.RegisterFragment(t.Context(), m(1, e1))
		require.NoError(t, err)
		// Gen 1 another epoch, gen 2 E1: E1 cannot have died in between.
		require.Zero(t, r.Apply(epoch.Event{Index: 2, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Restarted, NewEpoch: e1, Generation: 2}))
		require.NoError(t, q.Context().Err())
		q.Finish()
	})
}

// A part on an epoch no event has named survives an event that skipped
// generations when the event shows the member at an epoch that started
// before the part's: the skipped transitions precede that epoch in the
// log, which shows a member's epochs in the order they started, so none
// of them was to the part's epoch. A coordinator whose registry catches
// up past several transitions at once (an image installed while it was
// cut off) sees its worker's older epochs go by after it dispatched to
// the newest.
func TestPartOnAnUnnamedEpochSurvivesASkipToAnOlderEpoch(t *testing.T) {
	r := New(Config{})
	defer r.Close()
	e1, e3, x := epoch.New(), epoch.New(), epoch.New()
	r.Apply(epoch.Event{Index: 1, Node: 10, Kind: epoch.KindWorker, Type: epoch.Added, NewEpoch: e1, Generation: 1})
	q, err := r.RegisterFragment(t.Context(), m(10, x))
	require.NoError(t, err)
	// An E2 came and went in the gap; E3, which started before X, is
	// current.
	require.Zero(t, r.Apply(epoch.Event{Index: 2, Node: 10, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: e1, NewEpoch: e3, Generation: 4}),
		"Restarted(E1 -> E3) skipping two generations cancelled the part on X, which started after E3")
	require.NoError(t, q.Context().Err())
	require.Zero(t, r.Apply(epoch.Event{Index: 3, Node: 10, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: e3, NewEpoch: x, Generation: 5}))
	require.NoError(t, q.Context().Err())
	// Once named, X ends as any epoch does.
	require.Equal(t, 1, r.Apply(epoch.Event{Index: 4, Node: 10, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: x, NewEpoch: epoch.New(), Generation: 6}))
	requireCause(t, q, ErrNodeRestarted, 10)
}

// A part on an epoch no event has named is cancelled once an event shows
// the member at an epoch that started after it, even with no generation
// skipped: a worker that restarted twice (E1 -> E2 -> E3) before a
// heartbeat recorded E2 shows up as Restarted(E1 -> E3), and E2, which no
// event will ever name, has ended. A part on an epoch that started after
// the one an event shows is kept until an event names it, and a
// registration against an unnamed epoch that started before the current
// one is refused.
func TestPartOnAnUnnamedEpochCancelledByALaterOne(t *testing.T) {
	for _, side := range []string{"worker", "frontend"} {
		t.Run(side, func(t *testing.T) {
			r := New(Config{})
			defer r.Close()
			e1, e2, e3, e4 := epoch.New(), epoch.New(), epoch.New(), epoch.New()
			w := epoch.New()
			r.Apply(epoch.Event{Index: 1, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: e1, Generation: 1})
			r.Apply(epoch.Event{Index: 2, Node: 10, Kind: epoch.KindWorker, Type: epoch.Added, NewEpoch: w, Generation: 1})
			register := func(e epoch.Epoch) (*Query, error) {
				if side == "worker" {
					return r.RegisterFragment(t.Context(), m(1, e))
				}
				return r.Register(t.Context(), m(1, e), []Member{m(10, w)})
			}
			skipped, err := register(e2)
			require.NoError(t, err)
			ahead, err := register(e4)
			require.NoError(t, err)

			require.Equal(t, 1, r.Apply(epoch.Event{Index: 3, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Restarted, OldEpoch: e1, NewEpoch: e3, Generation: 2}))
			ce := requireCause(t, skipped, ErrNodeRestarted, 1)
			require.Equal(t, e2, ce.OldEpoch)
			require.Equal(t, e3, ce.NewEpoch)
			require.NoError(t, ahead.Context().Err(), "Restarted(E1 -> E3) cancelled the part on E4, which started after E3")
			_, err = register(e2)
			require.ErrorIs(t, err, ErrNodeRestarted, "E2 started before the current E3")

			require.Zero(t, r.Apply(epoch.Event{Index: 4, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Restarted, OldEpoch: e3, NewEpoch: e4, Generation: 3}))
			require.NoError(t, ahead.Context().Err())
			ahead.Finish()
		})
	}
}

// A part on an epoch no event has named survives an event that skipped
// generations and names that epoch, when the event says the epoch was
// first recorded too late to have died and come back in the gap
// (Event.EpochGeneration): a frontend that installed an image across a
// worker's death, restart, death and restart keeps a query registered
// against the worker's newest process. Recorded two or more generations
// before the event, the epoch may have died in the gap, and the part is
// cancelled as before.
func TestPartOnAnUnnamedEpochKeptWhenItsRecordLeavesNoRoomForADeath(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recorded uint64 // Event.EpochGeneration
		kept     bool
	}{
		{"recorded by the event", 12, true},
		{"recorded one generation before", 11, true},
		{"recorded two generations before", 10, false},
		{"recorded when unknown", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(Config{})
			defer r.Close()
			e1, x := epoch.New(), epoch.New()
			tmp := heartbeattest.TemporaryEpoch(e1, 7)
			r.Apply(epoch.Event{Index: 1, Node: 10, Kind: epoch.KindWorker, Type: epoch.Added, NewEpoch: e1, Generation: 6})
			r.Apply(epoch.Event{Index: 2, Node: 10, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e1, NewEpoch: tmp, Generation: 7})
			q, err := r.Register(t.Context(), m(1, epoch.New()), []Member{m(10, x)})
			require.NoError(t, err)
			n := r.Apply(epoch.Event{Index: 9, Node: 10, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: tmp, NewEpoch: x, Generation: 12, EpochGeneration: tc.recorded})
			if tc.kept {
				require.Zero(t, n)
				require.NoError(t, q.Context().Err())
				q.Finish()
				return
			}
			require.Equal(t, 1, n)
			requireCause(t, q, ErrNodeDead, 10)
		})
	}
}

// A death and a return folded by a resync arrive as Dead at the
// generation after the one last applied, then the return at the record's
// generation (heartbeat's eventsBetween and Responder): a part on the
// returned epoch, learnt ahead of the events, survives both, and a part
// on the epoch that died is cancelled by the Dead.
func TestFoldedDeathKeepsAPartOnTheReturnedEpoch(t *testing.T) {
	r := New(Config{})
	defer r.Close()
	c, e1, x := epoch.New(), epoch.New(), epoch.New()
	r.Apply(epoch.Event{Index: 1, Node: 1, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: c, Generation: 1})
	r.Apply(epoch.Event{Index: 2, Node: 10, Kind: epoch.KindWorker, Type: epoch.Added, NewEpoch: e1, Generation: 13, EpochGeneration: 13})
	old, err := r.Register(t.Context(), m(1, c), []Member{m(10, e1)})
	require.NoError(t, err)
	ahead, err := r.Register(t.Context(), m(1, c), []Member{m(10, x)})
	require.NoError(t, err)

	tmp := heartbeattest.TemporaryEpoch(e1, 16)
	require.Equal(t, 1, r.Apply(epoch.Event{Node: 10, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: e1, NewEpoch: tmp, Generation: 14, EpochGeneration: 13}))
	requireCause(t, old, ErrNodeDead, 10)
	require.NoError(t, ahead.Context().Err(), "the folded Dead cancelled the part on the epoch the member returned with")
	require.Zero(t, r.Apply(epoch.Event{Index: 3, Node: 10, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: tmp, NewEpoch: x, Generation: 18, EpochGeneration: 18}))
	require.NoError(t, ahead.Context().Err())
	ahead.Finish()
}
