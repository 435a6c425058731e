package frontend

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/journal"
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

// Through the HTTP API, a txn whose "owner" or "fence" names an epoch
// that is not the member's current one answers 409 epoch_ended, an
// unknown member 404 not_found, and the current epoch applies.
func TestTxnOwnerOrFenceOfAnEndedEpochAnswers409EpochEnded(t *testing.T) {
	f, ctx := startLeader(t)
	require.NoError(t, f.Journal().WaitClusterVersion(ctx, journal.NewestVersion))
	waitFor(t, 20*time.Second, "the frontend's own epoch recorded", func() bool {
		m, ok := f.Members().Member(1)
		return ok && m.Epoch == f.Epoch()
	})
	serve := func(body string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		f.routes().ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/txn", strings.NewReader(body)))
		var out map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), "%s: %s", body, rec.Body.String())
		return rec.Code, out
	}
	current, ended := f.Epoch().String(), heartbeat.NewEpoch().String()
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"fence of an ended epoch", `{"fence":{"member":1,"epoch":"` + ended + `"},"ops":[{"op":"create","path":"/a","kind":"task"}]}`, http.StatusConflict, "epoch_ended"},
		{"owner of an ended epoch", `{"ops":[{"op":"create","path":"/a","kind":"task","owner":{"member":1,"epoch":"` + ended + `"}}]}`, http.StatusConflict, "epoch_ended"},
		{"fence of an unknown member", `{"fence":{"member":7,"epoch":"` + current + `"},"ops":[{"op":"create","path":"/a","kind":"task"}]}`, http.StatusNotFound, "not_found"},
		{"owner of an unknown member", `{"ops":[{"op":"create","path":"/a","kind":"task","owner":{"member":7,"epoch":"` + current + `"}}]}`, http.StatusNotFound, "not_found"},
	} {
		code, out := serve(tc.body)
		require.Equal(t, tc.status, code, "%s: %v", tc.name, out)
		require.Equal(t, tc.code, out["error"], "%s: %v", tc.name, out)
	}
	_, ok := f.Tree().Get("/a")
	require.False(t, ok, "no refused txn applied")

	code, out := serve(`{"fence":{"member":1,"epoch":"` + current + `"},"ops":[{"op":"create","path":"/a","kind":"task","owner":{"member":1,"epoch":"` + current + `"}}]}`)
	require.Equal(t, http.StatusOK, code, "%v", out)
	_, ok = f.Tree().Owned("/a")
	require.True(t, ok, "the current epoch owns the node")
}
