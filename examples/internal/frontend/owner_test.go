package frontend

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/heartbeat"
)

// A txn's "owner" and "fence", a member and its epoch, map onto the
// member record's current version; a stale epoch answers 409
// epoch_ended, a bad one 400, and a node view shows its owner.
func TestOwnerAndFenceMapAMembersEpochOntoItsRecord(t *testing.T) {
	tree := catalog.New()
	epoch := heartbeat.NewEpoch()
	apply := func(index uint64, ops ...catalog.Op) {
		data, err := catalog.Batch{Ops: ops}.Encode()
		require.NoError(t, err)
		require.NoError(t, tree.Apply(index, data).(*catalog.Result).Err)
	}
	apply(1,
		catalog.Op{Type: catalog.OpCreate, Path: heartbeat.ClusterPath, Kind: "cluster"},
		catalog.Op{Type: catalog.OpCreate, Path: heartbeat.MembersPath, Kind: "members"},
		catalog.Op{Type: catalog.OpCreate, Path: heartbeat.MemberPath(101), Kind: heartbeat.MemberKind, Set: map[string]catalog.Value{
			"addr": catalog.String("w:1"), "kind": catalog.String("worker"), "role": catalog.String(""),
			"epoch": catalog.String(epoch.String()), "generation": catalog.Int(1), "status": catalog.String("alive"),
		}})
	f := &Frontend{tree: tree}

	owner, err := f.owner(&memberEpoch{Member: 101, Epoch: epoch.String(), Orphan: true})
	require.NoError(t, err)
	require.Equal(t, catalog.Owner{Path: heartbeat.MemberPath(101), Version: 1, Orphan: true}, owner)
	fence, err := f.fence(&memberEpoch{Member: 101, Epoch: epoch.String()})
	require.NoError(t, err)
	apply(2, fence, catalog.Op{Type: catalog.OpCreate, Path: "/task", Kind: "task", Owner: owner})
	n, _ := tree.Get("/task")
	require.Equal(t, &ownerView{Path: heartbeat.MemberPath(101), Version: 1, Orphan: true}, f.view(n, false).Owner)

	var he *httpjson.Error
	_, err = f.owner(&memberEpoch{Member: 101, Epoch: heartbeat.NewEpoch().String()})
	require.True(t, errors.As(apiError(err), &he))
	require.Equal(t, http.StatusConflict, he.Status)
	require.Equal(t, "epoch_ended", he.Code)
	_, err = f.fence(&memberEpoch{Member: 101, Epoch: "not an epoch"})
	require.True(t, errors.As(apiError(err), &he))
	require.Equal(t, http.StatusBadRequest, he.Status)
	_, err = f.owner(&memberEpoch{Member: 7, Epoch: epoch.String()})
	require.True(t, errors.As(apiError(err), &he))
	require.Equal(t, http.StatusNotFound, he.Status)
}
