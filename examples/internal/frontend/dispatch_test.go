package frontend

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fe "github.com/metatree/metatree/examples/frontend"

	"github.com/metatree/metatree/examples/internal/demo"
	"github.com/metatree/metatree/examples/internal/httpjson"
)

// TestDispatchRetriesAFragmentTheWorkerCannotPlaceYet: a worker that has
// not yet heard of the coordinator (503 coordinator_unknown) gets the
// fragment again until it takes it; any other refusal ends the dispatch at
// once, and so does the end of the request's context.
func TestDispatchRetriesAFragmentTheWorkerCannotPlaceYet(t *testing.T) {
	var calls atomic.Int32
	answers := make(chan error, 8)
	called := make(chan struct{}, 8)
	srv := httptest.NewServer(httpjson.Handler(func(w http.ResponseWriter, r *http.Request) error {
		calls.Add(1)
		called <- struct{}{}
		if err := <-answers; err != nil {
			return err
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"state": demo.Running})
		return nil
	}))
	defer srv.Close()
	f := &Frontend{cfg: Config{Config: fe.Config{HeartbeatInterval: 50 * time.Millisecond}}, logger: slog.New(slog.DiscardHandler), client: srv.Client()}
	addr := strings.TrimPrefix(srv.URL, "http://")
	frag := demo.Fragment{Query: "q1", Coordinator: 1, DurationMS: 1000}
	unknown := httpjson.Errorf(http.StatusServiceUnavailable, "coordinator_unknown", "cancel: unknown node: coordinator 1")

	drain := func() {
		for len(called) > 0 {
			<-called
		}
		calls.Store(0)
	}
	answers <- unknown
	answers <- unknown
	answers <- nil
	require.NoError(t, f.dispatch(t.Context(), 11, addr, frag))
	require.Equal(t, int32(3), calls.Load())

	drain()
	answers <- httpjson.Errorf(http.StatusConflict, "coordinator_gone", "cancel: node 1 restarted")
	err := f.dispatch(t.Context(), 11, addr, frag)
	require.ErrorContains(t, err, "status 409: cancel: node 1 restarted")
	require.Equal(t, int32(1), calls.Load())

	drain()
	for range 4 {
		answers <- unknown
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-called
		<-called
		cancel(context.DeadlineExceeded)
	}()
	err = f.dispatch(ctx, 11, addr, frag)
	<-done
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
