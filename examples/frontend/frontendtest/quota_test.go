package frontendtest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/journal"
)

// A catalog its users filled to its quota still admits a new worker (its
// member record is a new node) and records a worker's death, which
// cancels its queries: the cluster's own records are exempt from the
// quota (once the cluster writes batch format 4, cluster version 6).
func TestAFullCatalogStillAdmitsAWorkerAndRecordsADeath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx, leader, _ := threeWithLeaderIn(t, Options{Frontends: 3,
			Config: frontend.Config{Quota: catalog.Quota{MaxNodes: 64}}})
		require.NoError(t, c.Frontend(leader).Journal().WaitClusterVersion(ctx, journal.NewestVersion),
			"the member records pass a full catalog from cluster version 6 on")
		_, err := c.AddWorker(ctx, 4)
		require.NoError(t, err)
		q, err := c.StartQuery(ctx, leader, 4)
		require.NoError(t, err)
		defer q.Finish()

		for i := 0; ; i++ {
			require.Less(t, i, 200, "the quota never refused a write")
			res, err := c.Frontend(leader).Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate,
				Path: fmt.Sprintf("/fill%d", i), Kind: "dir", Set: map[string]catalog.Value{"v": catalog.String(strings.Repeat("x", 1024))}}}})
			if errors.Is(err, catalog.ErrQuota) {
				break
			}
			require.NoError(t, err)
			require.NoError(t, res.Err)
		}

		_, err = c.AddWorker(ctx, 5)
		require.NoError(t, err, "a worker joins a full catalog")
		c.StopWorker(4)
		requireCancelled(t, ctx, q.Context(), cancel.ErrNodeDead, 4)
		for i := 1; i <= 3; i++ {
			require.NoError(t, c.await(ctx, fmt.Sprintf("frontend %d records worker 4 dead", i), func() bool {
				m, ok := c.Frontend(i).Members().Member(4)
				return ok && m.Status == heartbeat.StatusDead
			}))
		}
	})
}
