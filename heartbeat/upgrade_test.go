package heartbeat_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/internal/fakejournal"
)

// A rolling upgrade to the release whose quota exempts the cluster's
// records (batch format 4), with the catalog full: while one replica still
// runs the older release (no exemption, batch formats up to 3) and the
// cluster writes format 3, a member joining is refused on every replica
// alike, and the replicas' digests stay equal; once that replica runs the
// newer release and the cluster writes format 4, the member's record is
// exempt and lands on every replica.
func TestAMemberJoinsAFullCatalogAlikeOnEveryReplicaAcrossTheUpgrade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		newer := catalog.Quota{MaxNodes: 16, Exempt: heartbeat.ClusterPath}
		log := fakejournal.New()
		trees := map[uint64]*catalog.Tree{}
		for id := uint64(1); id <= 3; id++ {
			tr := catalog.New()
			if id == 3 {
				// The older release: its quota has no exemption, and it
				// reads no batch format past 3.
				tr.LimitFormat(catalog.BatchV3)
				tr.SetQuota(catalog.Quota{MaxNodes: newer.MaxNodes})
			} else {
				tr.SetQuota(newer)
			}
			trees[id] = tr
			log.Attach(id, tr)
		}
		log.SetLease(1, 1, true)
		// The batch format the cluster writes: the newest every replica
		// reads.
		var format atomic.Int64
		format.Store(catalog.BatchV3)
		net := &network{handlers: map[string]http.Handler{}, black: map[[2]string]bool{}, delay: map[string]time.Duration{}}
		ms, err := heartbeat.New(heartbeat.Config{
			ID: 1, Epoch: epoch.New(), Cluster: "test", Tree: trees[1], Journal: log.Replica(1),
			Client:   &http.Client{Transport: transport{n: net, from: addrOf(1)}},
			Interval: interval, DeadAfter: deadAfter,
			BatchVersion: func() int { return int(format.Load()) },
		})
		require.NoError(t, err)
		defer func() { require.NoError(t, ms.Close()) }()
		ctx := t.Context()
		requireAlike := func(what string) {
			t.Helper()
			wi, wd := trees[1].Digest()
			for id, tr := range trees {
				i, d := tr.Digest()
				require.Equal(t, wi, i, "%s: replica %d applied up to another index (a halt)", what, id)
				require.Equal(t, wd, d, "%s: replica %d's catalog differs from replica 1's", what, id)
			}
		}

		require.NoError(t, ms.Add(ctx, heartbeat.Member{ID: 10, Addr: addrOf(10), Kind: epoch.KindWorker}))
		// The users fill the catalog.
		for i := 0; ; i++ {
			require.Less(t, i, 100, "the quota never refused a write")
			data, err := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: fmt.Sprintf("/fill%d", i), Kind: "dir"}}}.Encode()
			require.NoError(t, err)
			_, res := log.Commit(data)
			if errors.Is(res[1].(*catalog.Result).Err, catalog.ErrQuota) {
				break
			}
			require.NoError(t, res[1].(*catalog.Result).Err)
		}
		requireAlike("filled")

		worker := heartbeat.Member{ID: 11, Addr: addrOf(11), Kind: epoch.KindWorker}
		err = ms.Add(ctx, worker)
		requireAlike("a join in format 3")
		require.ErrorIs(t, err, catalog.ErrQuota, "the cluster writes format 3: the older release's refusal holds everywhere")
		for id, tr := range trees {
			_, ok := tr.Get(heartbeat.MemberPath(worker.ID))
			require.False(t, ok, "replica %d", id)
		}

		// Replica 3 restarts on the newer release from its catalog (as
		// from its image); every replica then reads format 4, and the
		// cluster writes it.
		var img bytes.Buffer
		require.NoError(t, trees[3].Save(&img))
		upgraded := catalog.New()
		upgraded.SetQuota(newer)
		require.NoError(t, upgraded.Load(&img))
		trees[3] = upgraded
		log.Attach(3, upgraded)
		format.Store(catalog.BatchV4)

		require.NoError(t, ms.Add(ctx, worker), "the cluster writes format 4: the member records are exempt")
		requireAlike("a join in format 4")
		for id, tr := range trees {
			_, ok := tr.Get(heartbeat.MemberPath(worker.ID))
			require.True(t, ok, "replica %d", id)
		}
	})
}
