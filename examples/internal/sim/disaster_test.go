package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
)

// The recovery is drawn from the seed alone: about one run in six of each
// kind, a forced new cluster only with three voters or more, in the middle
// of the faults.
func TestDrawDisasterIsTheSeedsAndFitsTheShape(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kinds := map[string]int{}
	for seed := uint64(1); seed <= 600; seed++ {
		a := drawDisaster(seed, 3, start, time.Minute)
		b := drawDisaster(seed, 3, start, time.Minute)
		require.Equal(t, a.kind, b.kind, "seed %d", seed)
		require.Equal(t, a.at, b.at, "seed %d", seed)
		kinds[a.kind]++
		if a.kind != "" {
			require.False(t, a.at.Before(start.Add(24*time.Second)), "seed %d at %v", seed, a.at)
			require.False(t, a.at.After(start.Add(42*time.Second)), "seed %d at %v", seed, a.at)
		}
		require.NotEqual(t, disasterForce, drawDisaster(seed, 1, start, time.Minute).kind, "a sole voter has no majority to lose")
	}
	require.InDelta(t, 100, kinds[disasterForce], 40)
	require.InDelta(t, 100, kinds[disasterRestore], 40)
	require.False(t, (*disaster)(nil).due(), "a run without a draw has no recovery")
}

// What the old cluster acknowledged after the surviving state was taken
// and the new cluster lacks is forgotten; what it acknowledged before
// stays, to be checked.
func TestDropLostForgetsOnlyWhatACutMayLose(t *testing.T) {
	tree := catalog.New()
	data, err := (catalog.Batch{Ops: []catalog.Op{
		{Type: catalog.OpCreate, Path: "/acked", Kind: "dir"},
		{Type: catalog.OpCreate, Path: "/acked/kept", Kind: "item"},
		{Type: catalog.OpCreate, Path: "/tasks", Kind: "dir"},
		{Type: catalog.OpCreate, Path: "/tasks/kept", Kind: "task"},
	}}).Encode()
	require.NoError(t, err)
	tree.Apply(1, data)
	_, ok := tree.Get("/tasks/kept")
	require.True(t, ok)

	cl := &clients{acked: []string{"/acked/early", "/acked/kept", "/acked/lost"}}
	cl.dropLost(1, tree)
	require.Equal(t, []string{"/acked/early", "/acked/kept"}, cl.acked, "the create before the barrier stays even if missing")

	o := &owned{nodes: []ownedNode{{path: "/tasks/early", index: 5}, {path: "/tasks/kept", index: 12}, {path: "/tasks/lost", index: 13}}}
	o.dropLost(10, tree)
	var paths []string
	for _, n := range o.nodes {
		paths = append(paths, n.path)
	}
	require.Equal(t, []string{"/tasks/early", "/tasks/kept"}, paths)
	(*owned)(nil).dropLost(10, tree)
}
