package sim

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/examples/frontend/frontendtest"
	"github.com/metatree/metatree/heartbeat"
)

// The filler brings the catalog to within a byte of a bytes quota (or to
// a node quota's last node): a create is refused then, while a worker
// still joins and restarts (its member records are exempt); a drain
// brings the catalog back under the quota.
func TestFillerFillsToTheQuotaWhereMembersStillJoin(t *testing.T) {
	for _, q := range []catalog.Quota{{MaxBytes: 9000}, {MaxNodes: 40}, {MaxNodes: 200, MaxBytes: 12000}} {
		t.Run(map[bool]string{true: "bytes", false: "nodes"}[q.MaxBytes > 0]+map[bool]string{true: "+nodes", false: ""}[q.MaxBytes > 0 && q.MaxNodes > 0], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := frontend.Config{Token: "sim", RequestTimeout: 3 * time.Second, Quota: q}
				c := frontendtest.NewCluster(t, frontendtest.Options{Frontends: 1, InMemory: true, Config: cfg})
				r := &run{cfg: cfg, c: c, n: 1, voters: 1, timeout: cfg.RequestTimeout, hist: newHistory(time.Now(), nil)}
				ctx := t.Context()
				require.NoError(t, r.setup(ctx))
				f := c.Frontend(1)
				fl := &filler{r: r}

				require.True(t, fl.fill(ctx))
				u := f.Tree().Usage()
				if q.MaxBytes > 0 {
					require.LessOrEqual(t, q.MaxBytes-u.Bytes, int64(1), "within a byte of the quota")
					require.GreaterOrEqual(t, q.MaxBytes-u.Bytes, int64(0))
				} else {
					require.Equal(t, q.MaxNodes, u.Nodes)
				}
				_, err := f.Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/x", Kind: "dir"}}})
				require.ErrorIs(t, err, catalog.ErrQuota)

				// A refused member record would leave the worker waiting
				// for its record: the bound ends the wait.
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				w, err := c.AddWorker(wctx, 2)
				require.NoError(t, err, "a worker joins a full catalog")
				_, err = c.RestartWorker(wctx, 2)
				require.NoError(t, err, "and restarts in it")
				m, ok := f.Members().Member(2)
				require.True(t, ok)
				require.Equal(t, heartbeat.StatusAlive, m.Status)
				require.NotEqual(t, w.Epoch(), m.Epoch, "the restart is recorded")
				require.Equal(t, c.Worker(2).Epoch(), m.Epoch)

				fl.drain(ctx)
				_, ok = f.Tree().Get(fillDir)
				require.False(t, ok)
				_, err = f.Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/x", Kind: "dir"}}})
				require.NoError(t, err, "the drained catalog takes a create again")
			})
		})
	}
}

func TestFillerFullMeansWithinAByteOrAtTheLastNode(t *testing.T) {
	require.True(t, full(catalog.Quota{MaxBytes: 100}, catalog.Usage{Bytes: 99}))
	require.True(t, full(catalog.Quota{MaxBytes: 100}, catalog.Usage{Bytes: 100}))
	require.False(t, full(catalog.Quota{MaxBytes: 100}, catalog.Usage{Bytes: 98}))
	require.False(t, full(catalog.Quota{MaxBytes: 100}, catalog.Usage{Bytes: 101}), "over the quota is no fill of the filler's")
	require.True(t, full(catalog.Quota{MaxNodes: 10}, catalog.Usage{Nodes: 10}))
	require.False(t, full(catalog.Quota{MaxNodes: 10}, catalog.Usage{Nodes: 9}))
	require.True(t, full(catalog.Quota{MaxNodes: 10, MaxBytes: 1000}, catalog.Usage{Nodes: 10, Bytes: 500}))
}
