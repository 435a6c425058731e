package heartbeat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/heartbeat"
)

// workerView is a worker's responder feeding its cancel registry, driven
// by hand-written leader heartbeats.
type workerView struct {
	resp *heartbeat.Responder
	reg  *cancel.Registry
}

func newWorkerView(t *testing.T) *workerView {
	t.Helper()
	w := &workerView{reg: cancel.New(cancel.Config{})}
	t.Cleanup(func() { require.NoError(t, w.reg.Close()) })
	var err error
	w.resp, err = heartbeat.NewResponder(heartbeat.ResponderConfig{ID: 10, Epoch: heartbeat.NewEpoch(),
		OnEvent: func(ev heartbeat.Event) { w.reg.Apply(ev) }})
	require.NoError(t, err)
	return w
}

// list delivers one leader heartbeat whose frontend list is fronts.
func (w *workerView) list(t *testing.T, version uint64, fronts ...heartbeat.FrontendEpoch) {
	t.Helper()
	body, err := json.Marshal(heartbeat.Request{Leader: 1, Term: 1, Member: 10, Version: version, Frontends: fronts})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	w.resp.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, heartbeat.Path, bytes.NewReader(body)))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

// A coordinator that restarted twice (E1 -> E2 -> E3) dispatches from E3
// before the worker has heard of E3: the worker's next list, showing E2,
// leaves the E3 fragment running, as does the one showing E3; the restart
// after E3 cancels it.
func TestWorkerKeepsTheFragmentOfACoordinatorTwiceRestarted(t *testing.T) {
	w := newWorkerView(t)
	e1, e2, e3, e4 := heartbeat.NewEpoch(), heartbeat.NewEpoch(), heartbeat.NewEpoch(), heartbeat.NewEpoch()
	w.list(t, 10, heartbeat.FrontendEpoch{ID: 1, Gen: 1, Epoch: e1, Since: 5})
	frag, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 1, Epoch: e3})
	require.NoError(t, err)

	w.list(t, 20, heartbeat.FrontendEpoch{ID: 1, Gen: 2, Epoch: e2, Since: 5})
	require.NoError(t, frag.Context().Err(), "the list showing E2 cancelled the fragment of E3: %v", context.Cause(frag.Context()))
	w.list(t, 30, heartbeat.FrontendEpoch{ID: 1, Gen: 3, Epoch: e3, Since: 5})
	require.NoError(t, frag.Context().Err())
	w.list(t, 40, heartbeat.FrontendEpoch{ID: 1, Gen: 4, Epoch: e4, Since: 5})
	requireCancelled(t, frag, cancel.ErrNodeRestarted, 1)
}

// A worker that missed the lists in which a coordinator it knew without an
// epoch answered with E1, was declared dead and came back with E1 cancels a
// fragment registered on E1 before those lists: E1 may have died after the
// fragment started.
func TestWorkerThatMissedADeathFromNoEpochCancelsTheFragment(t *testing.T) {
	w := newWorkerView(t)
	e1 := heartbeat.NewEpoch()
	w.list(t, 10, heartbeat.FrontendEpoch{ID: 1, Since: 5})
	frag, err := w.reg.RegisterFragment(t.Context(), cancel.Member{Node: 1, Epoch: e1})
	require.NoError(t, err)
	w.list(t, 40, heartbeat.FrontendEpoch{ID: 1, Gen: 3, Epoch: e1, Since: 5})
	requireCancelled(t, frag, cancel.ErrNodeDead, 1)
}
