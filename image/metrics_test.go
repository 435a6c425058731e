package image

import (
	"context"
	"errors"
	"github.com/metatree/metatree/internal/metricstest"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// scrape gathers cs on a fresh registry: each series' value by name and
// labels (a histogram's sample count).
func scrape(t *testing.T, cs ...prometheus.Collector) map[string]float64 {
	t.Helper()
	return metricstest.Scrape(t, cs...)
}

func TestCollectorsExactValues(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, vfs.NewMem())
	got := scrape(t, n.store.Collector(), n.cp.Collector())
	require.Equal(t, map[string]float64{
		"metatree_image_last_index":                       0,
		"metatree_image_restores_total":                   0,
		"metatree_image_checkpoints_total{result=ok}":     0,
		"metatree_image_checkpoints_total{result=failed}": 0,
		"metatree_image_checkpoint_duration_seconds":      0,
	}, got, "no age while there is no image")

	n.j.append(250)
	_, err := n.cp.Checkpoint(ctx)
	require.NoError(t, err)
	_, err = n.cp.Checkpoint(ctx) // nothing new: neither ok nor failed
	require.NoError(t, err)
	n.j.append(10)
	n.j.FailImageWritten(errors.New("journal: disk full"))
	_, err = n.cp.Checkpoint(ctx)
	require.Error(t, err)

	got = scrape(t, n.store.Collector(), n.cp.Collector())
	require.Equal(t, 1.0, got["metatree_image_checkpoints_total{result=ok}"])
	require.Equal(t, 1.0, got["metatree_image_checkpoints_total{result=failed}"])
	require.Equal(t, 1.0, got["metatree_image_checkpoint_duration_seconds"])
	require.Equal(t, 260.0, got["metatree_image_last_index"], "the image written before recording it failed is the newest file")
	require.Contains(t, got, "metatree_image_age_seconds")
	require.GreaterOrEqual(t, got["metatree_image_age_seconds"], 0.0)
	require.Less(t, got["metatree_image_age_seconds"], 600.0)
}

func TestStoreCollectorCountsRestores(t *testing.T) {
	ctx := context.Background()
	p := newPeer(t, 300, nil)
	s := openStore(t, vfs.NewMem(), "/dst", newKV())
	require.NoError(t, s.Fetch(ctx, p.addr(), 300))
	require.Equal(t, 0.0, scrape(t, s.Collector())["metatree_image_restores_total"], "fetched, not installed")
	require.NoError(t, s.Install(ctx, 300))
	got := scrape(t, s.Collector())
	require.Equal(t, 1.0, got["metatree_image_restores_total"])
	require.Equal(t, 300.0, got["metatree_image_last_index"])
}
