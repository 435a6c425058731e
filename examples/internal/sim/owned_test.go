package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
)

// The owned-node check finds a node that outlives its owner's version, one
// that went while its version was current, and one orphaned that should
// have gone; a node gone with its version, or orphaned as asked, passes.
func TestOwnedCheckFindsNodesThatOutliveOrPredeceaseTheirEpoch(t *testing.T) {
	tree := catalog.New()
	apply := func(index uint64, ops ...catalog.Op) {
		data, err := catalog.Batch{Ops: ops}.Encode()
		require.NoError(t, err)
		res := tree.Apply(index, data).(*catalog.Result)
		require.NoError(t, res.Err)
	}
	rec := heartbeat.MemberPath(4)
	apply(1, catalog.Op{Type: catalog.OpCreate, Path: heartbeat.ClusterPath, Kind: "dir"},
		catalog.Op{Type: catalog.OpCreate, Path: heartbeat.MembersPath, Kind: "dir"},
		catalog.Op{Type: catalog.OpCreate, Path: rec, Kind: "member"},
		catalog.Op{Type: catalog.OpCreate, Path: "/tasks", Kind: "dir"})
	apply(2, catalog.Op{Type: catalog.OpCreate, Path: "/tasks/live", Kind: "task"},
		catalog.Op{Type: catalog.OpCreate, Path: "/tasks/kept", Kind: "task", Set: map[string]catalog.Value{catalog.OrphanedAttr: catalog.Int(2)}})
	failures := func(nodes ...ownedNode) string {
		r := &run{hist: newHistory(time.Now(), nil)}
		o := &owned{r: r, nodes: nodes}
		o.check(1, tree)
		return strings.Join(r.failures, "\n")
	}
	current := catalog.Owner{Path: rec, Version: 1}
	ended := catalog.Owner{Path: rec, Version: 0}
	require.Empty(t, failures(ownedNode{path: "/tasks/live", worker: 4, owner: current, index: 2}))
	require.Empty(t, failures(ownedNode{path: "/tasks/gone", worker: 4, owner: ended, index: 2}))
	require.Empty(t, failures(ownedNode{path: "/tasks/kept", worker: 4, owner: catalog.Owner{Path: rec, Orphan: true}, index: 2}))
	require.Contains(t, failures(ownedNode{path: "/tasks/live", worker: 4, owner: ended, index: 2}), "outlives its epoch")
	require.Contains(t, failures(ownedNode{path: "/tasks/gone", worker: 4, owner: current, index: 2}), "is gone while")
	require.Contains(t, failures(ownedNode{path: "/tasks/kept", worker: 4, owner: ended, index: 2}), "asked for it to go")
}

// A kept fence's epoch ended once a later version of the member record
// names another epoch, shows the member dead, or shows it alive with the
// same epoch at a later generation (a death and a return in between); the
// record at the fence's version, or an older one, proves nothing.
func TestKeptFenceEndsWithADeathNotOnlyARestart(t *testing.T) {
	e, other := epoch.New(), epoch.New()
	k := keptFence{op: heartbeat.Fence(4, e), at: 10, gen: 2}
	rec := func(modified uint64, epoch epoch.Epoch, status heartbeat.Status, gen int64) catalog.Node {
		return catalog.Node{Path: heartbeat.MemberPath(4), Modified: modified, Attrs: map[string]catalog.Value{
			"epoch": catalog.String(epoch.String()), "status": catalog.String(status.String()), "generation": catalog.Int(gen)}}
	}
	for _, tc := range []struct {
		name  string
		rec   catalog.Node
		ended bool
	}{
		{"the fence's version", rec(10, e, heartbeat.StatusAlive, 2), false},
		{"an older version", rec(9, other, heartbeat.StatusAlive, 1), false},
		{"restarted", rec(11, other, heartbeat.StatusAlive, 3), true},
		{"declared dead", rec(11, e, heartbeat.StatusDead, 3), true},
		{"dead and back with the epoch", rec(12, e, heartbeat.StatusAlive, 4), true},
	} {
		require.Equal(t, tc.ended, k.ended(tc.rec), tc.name)
	}
}

// A recovery forgets the fences kept on the old cluster: the new cluster
// goes on from a surviving state, where the same epoch can be current at
// a later generation, which a fence kept on the old cluster would take
// for the epoch's end. A fence taken in an iteration that
// began before the cut is not kept, nor used by one; the owned nodes
// created after the cut are forgotten.
func TestFencesKeptOnTheOldClusterAreForgottenAtACut(t *testing.T) {
	e := epoch.New()
	o := &owned{fences: map[uint64]keptFence{}}
	old := keptFence{op: heartbeat.Fence(4, e), at: 1450, gen: 10, era: 0}
	o.keep(4, old)
	_, ok := o.kept(4, 0)
	require.True(t, ok, "kept in its era")

	o.nodes = []ownedNode{{path: "/tasks/t4-1", worker: 4, index: 1300}, {path: "/tasks/t4-2", worker: 4, index: 1460}}
	o.cut(1400)
	require.Equal(t, []ownedNode{{path: "/tasks/t4-1", worker: 4, index: 1300}}, o.nodes, "a node created after the cut is lost by design")
	_, ok = o.kept(4, 0)
	require.False(t, ok, "an old cluster's fence used by an iteration of its era after the cut")
	_, ok = o.kept(4, 1)
	require.False(t, ok, "an old cluster's fence used on the new cluster")

	o.keep(4, old) // an iteration that chose its frontend before the cut
	_, ok = o.kept(4, 1)
	require.False(t, ok, "a fence of the old cluster kept after the cut")

	fresh := keptFence{op: heartbeat.Fence(4, e), at: 1489, gen: 11, era: 1}
	o.keep(4, fresh)
	got, ok := o.kept(4, 1)
	require.True(t, ok)
	require.Equal(t, fresh, got)
}
