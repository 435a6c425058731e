package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
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
