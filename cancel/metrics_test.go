package cancel

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/heartbeattest"
)

func TestCollectorExactValues(t *testing.T) {
	r, ep := cluster(t)
	const want = `
# HELP metatree_cancel_cancelled_total Queries (or fragments) cancelled by a membership event, by reason.
# TYPE metatree_cancel_cancelled_total counter
metatree_cancel_cancelled_total{reason="dead"} %d
metatree_cancel_cancelled_total{reason="removed"} %d
metatree_cancel_cancelled_total{reason="restarted"} %d
# HELP metatree_cancel_live_queries Queries (or fragments, on a worker) registered and neither finished nor cancelled.
# TYPE metatree_cancel_live_queries gauge
metatree_cancel_live_queries %d
`
	expect := func(dead, removed, restarted, live int) {
		t.Helper()
		exp := strings.NewReader(fmt.Sprintf(want, dead, removed, restarted, live))
		require.NoError(t, testutil.CollectAndCompare(r.Collector(), exp))
	}
	expect(0, 0, 0, 0) // every reason exists from the start

	for range 3 {
		_, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(10, ep[10])})
		require.NoError(t, err)
	}
	_, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(11, ep[11])})
	require.NoError(t, err)
	_, err = r.Register(t.Context(), m(1, ep[1]), []Member{m(12, ep[12])})
	require.NoError(t, err)
	done, err := r.Register(t.Context(), m(1, ep[1]), []Member{m(12, ep[12])})
	require.NoError(t, err)
	done.Finish()
	expect(0, 0, 0, 5)

	r.Apply(epoch.Event{Index: 100, Node: 10, Kind: epoch.KindWorker, Type: epoch.Restarted, OldEpoch: ep[10], NewEpoch: epoch.New(), Generation: 2})
	r.Apply(epoch.Event{Index: 101, Node: 11, Kind: epoch.KindWorker, Type: epoch.Dead, OldEpoch: ep[11], NewEpoch: heartbeattest.TemporaryEpoch(ep[11], 2), Generation: 2})
	r.Apply(epoch.Event{Index: 102, Node: 12, Kind: epoch.KindWorker, Type: epoch.Removed, OldEpoch: ep[12], Generation: 2})
	expect(1, 1, 3, 0)
}
