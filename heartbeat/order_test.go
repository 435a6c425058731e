package heartbeat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/heartbeattest"
	"github.com/metatree/metatree/heartbeat/responder"
)

// workerView is a worker's responder feeding its cancel registry, driven
// by hand-written leader heartbeats.
type workerView struct {
	resp *responder.Responder
	reg  *cancel.Registry
}

func newWorkerView(t *testing.T) *workerView {
	t.Helper()
	w := &workerView{reg: cancel.New(cancel.Config{})}
	t.Cleanup(func() { require.NoError(t, w.reg.Close()) })
	var err error
	w.resp, err = responder.New(responder.Config{ID: 10, Epoch: epoch.New(),
		OnEvent: func(ev epoch.Event) { w.reg.Apply(ev) }})
	require.NoError(t, err)
	return w
}

// list delivers one leader heartbeat whose frontend list is fronts.
func (w *workerView) list(t *testing.T, version uint64, fronts ...responder.FrontendEpoch) {
	t.Helper()
	require.Equal(t, http.StatusOK, w.beat(t, responder.Request{Leader: 1, Term: 1, Member: 10, Version: version, Frontends: fronts}))
}

// beat delivers one heartbeat and returns the status it was answered.
func (w *workerView) beat(t *testing.T, hb responder.Request) int {
	t.Helper()
	body, err := json.Marshal(hb)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	w.resp.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, responder.Path, bytes.NewReader(body)))
	return rec.Code
}

// A coordinator that restarted twice (E1 -> E2 -> E3) dispatches from E3
// before the worker has heard of E3: the worker's next list, showing E2,
// leaves the E3 fragment running, as does the one showing E3; the restart
// after E3 cancels it.
func TestWorkerKeepsTheFragmentOfACoordinatorTwiceRestarted(t *testing.T) {
	w := newWorkerView(t)
	e1, e2, e3, e4 := epoch.New(), epoch.New(), epoch.New(), epoch.New()
	w.list(t, 10, responder.FrontendEpoch{ID: 1, Gen: 1, Epoch: e1, Since: 5})
	frag, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 1, Epoch: e3})
	require.NoError(t, err)

	w.list(t, 20, responder.FrontendEpoch{ID: 1, Gen: 2, Epoch: e2, Since: 5})
	require.NoError(t, frag.Context().Err(), "the list showing E2 cancelled the fragment of E3: %v", context.Cause(frag.Context()))
	w.list(t, 30, responder.FrontendEpoch{ID: 1, Gen: 3, Epoch: e3, Since: 5})
	require.NoError(t, frag.Context().Err())
	w.list(t, 40, responder.FrontendEpoch{ID: 1, Gen: 4, Epoch: e4, Since: 5})
	requireCancelled(t, frag, cancel.ErrNodeRestarted, 1)
}

// A worker that missed the lists in which a coordinator it knew without an
// epoch answered with E1, was declared dead and came back with E1 cancels a
// fragment registered on E1 before those lists: E1 may have died after the
// fragment started.
func TestWorkerThatMissedADeathFromNoEpochCancelsTheFragment(t *testing.T) {
	w := newWorkerView(t)
	e1 := epoch.New()
	w.list(t, 10, responder.FrontendEpoch{ID: 1, Since: 5})
	frag, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 1, Epoch: e1})
	require.NoError(t, err)
	w.list(t, 40, responder.FrontendEpoch{ID: 1, Gen: 3, Epoch: e1, Since: 5})
	requireCancelled(t, frag, cancel.ErrNodeDead, 1)
}

// A worker whose lists skipped a coordinator's restart (E1 -> E2) and
// then show E2 declared dead keeps a fragment the coordinator dispatched
// from a still later epoch X: the list names E2 as the epoch that died,
// so the death cancels the fragments on E1 and E2 and no others.
func TestWorkerThatMissedARestartBeforeADeathKeepsALaterFragment(t *testing.T) {
	w := newWorkerView(t)
	e1, e2, x := epoch.New(), epoch.New(), epoch.New()
	w.list(t, 10, responder.FrontendEpoch{ID: 1, Gen: 1, Epoch: e1, Since: 5, Recorded: 1})
	fragment := func(e epoch.Epoch) *cancel.Query {
		q, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 1, Epoch: e})
		require.NoError(t, err)
		return q
	}
	onE1, onE2, onX := fragment(e1), fragment(e2), fragment(x)

	w.list(t, 30, responder.FrontendEpoch{ID: 1, Gen: 3, Epoch: heartbeattest.TemporaryEpoch(e2, 3), Dead: true, Died: 3, Since: 5, Recorded: 2, Ended: e2})
	require.NoError(t, onX.Context().Err(), "the death of E2 cancelled the fragment of X: %v", context.Cause(onX.Context()))
	requireCancelled(t, onE1, cancel.ErrNodeRestarted, 1)
	requireCancelled(t, onE2, cancel.ErrNodeDead, 1)
	w.list(t, 40, responder.FrontendEpoch{ID: 1, Gen: 4, Epoch: x, Died: 3, Since: 5, Recorded: 4})
	require.NoError(t, onX.Context().Err())
	onX.Finish()
}

// A forged list (a huge version, no frontends) removes the coordinator from
// an -insecure worker's registry; once the forger has been silent for
// StaleAfter, the real leader's lists, older than the forged one, bring the
// coordinator back, and its fragments register again.
func TestWorkerRegistryRecoversFromAForgedListVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkerView(t)
		e1 := epoch.New()
		real := responder.FrontendEpoch{ID: 1, Gen: 1, Epoch: e1, Since: 5}
		w.list(t, 10, real)
		frag, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 1, Epoch: e1})
		require.NoError(t, err)
		w.beat(t, responder.Request{Leader: 66, Term: 1 << 40, Member: 10, Version: 1 << 40})
		requireCancelled(t, frag, cancel.ErrNodeRemoved, 1)

		for v := uint64(11); ; v++ {
			time.Sleep(time.Second)
			w.beat(t, responder.Request{Leader: 1, Term: 1, Member: 10, Version: v, Frontends: []responder.FrontendEpoch{real}})
			if st, ok := w.reg.Node(1); ok && st.Status == cancel.StatusAlive {
				break
			}
			require.Less(t, v, uint64(30), "the coordinator never came back")
		}
		frag, err = w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 1, Epoch: e1})
		require.NoError(t, err)
		// Later transitions from the real leader's lists still apply.
		w.beat(t, responder.Request{Leader: 1, Term: 1, Member: 10, Version: 40,
			Frontends: []responder.FrontendEpoch{{ID: 1, Gen: 2, Epoch: epoch.New(), Since: 5}}})
		requireCancelled(t, frag, cancel.ErrNodeRestarted, 1)
	})
}
