package responder

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/heartbeat/epoch"
)

// newUnpinned returns a responder with no Config.Cluster, as a worker
// runs: it follows whichever cluster's heartbeats it accepts.
func newUnpinned(t *testing.T) *responderFixture {
	f := &responderFixture{clock: &manualClock{now: time.Unix(1000, 0)}}
	var err error
	f.r, err = New(Config{ID: 9, Epoch: epoch.New(), Clock: f.clock, StaleAfter: 5 * time.Second,
		OnEvent: func(e epoch.Event) { f.events = append(f.events, e) }})
	require.NoError(t, err)
	return f
}

// beatAs sends hb to member 9 with its cluster as it is (beat fills in
// cluster c1).
func (f *responderFixture) beatAs(t *testing.T, hb Request) (int, string) {
	t.Helper()
	hb.Member = 9
	code, body := f.post(t, hb)
	return code, string(body)
}

// A restore starts a new cluster, at the backup's term, which can be lower
// than the one the old cluster reached. A worker that follows the old
// cluster moves to the new one at its first heartbeat, which names the old
// one replaced, and learns that the old frontends are gone; the old
// cluster's heartbeats are refused from then on, whatever their term, so
// an old member started again cannot take the worker back.
func TestResponderMovesToTheClusterThatReplacedItsOwn(t *testing.T) {
	f := newUnpinned(t)
	old, restored := epoch.New(), epoch.New()
	code, body := f.beatAs(t, Request{Cluster: "old", Leader: 1, Term: 9, Version: 500, Frontends: []FrontendEpoch{{ID: 1, Gen: 1, Epoch: old}}})
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, f.take(), 1) // epoch.Added

	// The restored cluster's first heartbeat: a lower term and an older
	// list version than the old cluster's, and the old cluster's
	// heartbeats still fresh.
	f.clock.Advance(time.Second)
	code, body = f.beatAs(t, Request{Cluster: "new", Replaced: []string{"old"}, Leader: 7, Term: 3, Version: 120, Frontends: []FrontendEpoch{{ID: 7, Gen: 1, Epoch: restored}}})
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, uint64(3), f.r.Term())
	// Index 0: a consumer applied the old cluster's events at higher
	// indexes, and must not drop these as replays.
	require.ElementsMatch(t, []epoch.Event{
		{Node: 1, Kind: epoch.KindFrontend, Type: epoch.Removed, OldEpoch: old, Generation: 1},
		{Node: 7, Kind: epoch.KindFrontend, Type: epoch.Added, NewEpoch: restored, Generation: 1},
	}, f.take())

	// The old cluster's leader, started again at a higher term, is
	// refused, however long the new cluster is silent.
	for _, wait := range []time.Duration{0, 10 * time.Second} {
		f.clock.Advance(wait)
		code, body = f.beatAs(t, Request{Cluster: "old", Leader: 1, Term: 10, Version: 510, Frontends: []FrontendEpoch{{ID: 1, Gen: 2, Epoch: epoch.New()}}})
		require.Equal(t, http.StatusConflict, code)
		require.Contains(t, body, `cluster \"old\" was replaced by cluster \"new\"`)
	}
	require.Empty(t, f.take())
	require.Equal(t, uint64(3), f.r.Term())
	_, ok := f.r.Frontend(1)
	require.False(t, ok, "the old frontend stays removed")

	// The new cluster's later lists apply as usual; their events carry
	// Index 0 up to the old cluster's last version, their own past it.
	for _, v := range []struct{ version, index uint64 }{{130, 0}, {600, 600}} {
		code, body = f.beatAs(t, Request{Cluster: "new", Replaced: []string{"old"}, Leader: 7, Term: 3, Version: v.version, Frontends: []FrontendEpoch{{ID: 7, Gen: 2 + v.version, Epoch: epoch.New()}}})
		require.Equal(t, http.StatusOK, code, body)
		evs := f.take()
		require.Len(t, evs, 1)
		require.Equal(t, epoch.Restarted, evs[0].Type)
		require.Equal(t, v.index, evs[0].Index)
	}
}

// A member that first hears the restored cluster refuses the clusters it
// replaced from the start; a cluster that replaced nothing it followed is
// fenced by terms as before: a lower term waits for the higher one's
// silence.
func TestResponderRefusesReplacedClustersAndFencesOthersByTerm(t *testing.T) {
	f := newUnpinned(t)
	code, body := f.beatAs(t, Request{Cluster: "new", Replaced: []string{"older", "old"}, Leader: 7, Term: 3, Version: 10})
	require.Equal(t, http.StatusOK, code, body)
	for _, c := range []string{"old", "older"} {
		code, body = f.beatAs(t, Request{Cluster: c, Leader: 1, Term: 50, Version: 900})
		require.Equal(t, http.StatusConflict, code, c)
		require.Contains(t, body, "was replaced")
	}

	code, _ = f.beatAs(t, Request{Cluster: "other", Leader: 2, Term: 2, Version: 20})
	require.Equal(t, http.StatusConflict, code, "a lower term of an unrelated cluster")
	f.clock.Advance(6 * time.Second)
	code, body = f.beatAs(t, Request{Cluster: "other", Leader: 2, Term: 2, Version: 20})
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, uint64(2), f.r.Term())
}
