package frontend

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	fe "github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/heartbeattest"
	"github.com/metatree/metatree/heartbeat/responder"
	"github.com/metatree/metatree/journal"
)

// ownerLeader starts a leader whose own epoch (member 1's) is journaled,
// and returns a function that serves one request through its API.
func ownerLeader(t *testing.T) (*Frontend, func(method, path, body string) (int, map[string]any)) {
	t.Helper()
	f, ctx := startLeader(t)
	require.NoError(t, f.Journal().WaitClusterVersion(ctx, journal.NewestVersion))
	waitFor(t, 20*time.Second, "the frontend's own epoch recorded", func() bool {
		m, ok := f.Members().Member(1)
		return ok && m.Epoch == f.Epoch()
	})
	return f, func(method, path, body string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		f.routes().ServeHTTP(rec, httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body)))
		var out map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), "%s %s %s: %s", method, path, body, rec.Body.String())
		return rec.Code, out
	}
}

// PUT and a txn's create take "owner": {"node": N} (the member's epoch when
// the batch applies) or {"node": N, "epoch": "E"}, and "on_owner_lost";
// the node's GET shows "owner": {"node", "epoch"} and "on_owner_lost".
func TestPutAndTxnCreateNodesOwnedByAMembersEpochThatGetShows(t *testing.T) {
	f, serve := ownerLeader(t)
	epoch := f.Epoch().String()
	for _, tc := range []struct {
		name, method, path, body, node, onLost string
	}{
		{"PUT, current epoch", "PUT", "/v1/catalog/a", `{"kind":"task","owner":{"node":1}}`, "/a", "delete"},
		{"PUT, the epoch given", "PUT", "/v1/catalog/b", `{"kind":"task","owner":{"node":1,"epoch":"` + epoch + `"},"on_owner_lost":"orphan"}`, "/b", "orphan"},
		{"txn, current epoch", "POST", "/v1/txn", `{"ops":[{"op":"create","path":"/c","kind":"task","owner":{"node":1},"on_owner_lost":"delete"}]}`, "/c", "delete"},
		{"txn, the epoch given", "POST", "/v1/txn", `{"ops":[{"op":"create","path":"/d","kind":"task","owner":{"node":1,"epoch":"` + epoch + `"},"on_owner_lost":"orphan"},
			{"op":"create","path":"/e","kind":"task","owner":{"node":1,"epoch":"` + epoch + `"}}]}`, "/d", "orphan"},
	} {
		code, out := serve(tc.method, tc.path, tc.body)
		require.Equal(t, http.StatusOK, code, "%s: %v", tc.name, out)
		code, out = serve("GET", "/v1/catalog"+tc.node, "")
		require.Equal(t, http.StatusOK, code, "%s: %v", tc.name, out)
		require.Equal(t, map[string]any{"node": 1.0, "epoch": epoch}, out["owner"], tc.name)
		require.Equal(t, tc.onLost, out["on_owner_lost"], tc.name)
		o, ok := f.Tree().Owned(tc.node)
		require.True(t, ok, tc.name)
		require.Equal(t, heartbeat.MemberPath(1), o.Path, tc.name)
		require.Equal(t, tc.onLost == "orphan", o.Orphan, tc.name)
	}
	code, out := serve("GET", "/v1/catalog/e", "")
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, map[string]any{"node": 1.0, "epoch": epoch}, out["owner"])

	code, out = serve("PUT", "/v1/catalog/a", `{"kind":"task","owner":{"node":1}}`)
	require.Equal(t, http.StatusConflict, code, "a PUT with an owner only creates: %v", out)
	require.Equal(t, "exists", out["error"])
	code, out = serve("PUT", "/v1/catalog/free", `{"kind":"task"}`)
	require.Equal(t, http.StatusOK, code, "%v", out)
	_, hasOwner := out["node"].(map[string]any)["owner"]
	require.False(t, hasOwner, "an unowned node shows no owner: %v", out)
}

// An owner whose epoch is not the member's current one answers 409
// owner_not_current, an unknown owner 404 not_found, an if_epoch that is
// not current 409 conflict, through PUT and txn alike; malformed owners
// and the former shapes 400. Nothing refused applies.
func TestOwnerAndIfEpochRefusalsThroughPutAndTxn(t *testing.T) {
	f, serve := ownerLeader(t)
	current, ended := f.Epoch().String(), epoch.New().String()
	temporary := heartbeattest.TemporaryEpoch(f.Epoch(), 3).String()
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"PUT owner of an ended epoch", "PUT", "/v1/catalog/x", `{"kind":"task","owner":{"node":1,"epoch":"` + ended + `"}}`, 409, "owner_not_current"},
		{"txn owner of an ended epoch", "POST", "/v1/txn", `{"ops":[{"op":"create","path":"/x","kind":"task","owner":{"node":1,"epoch":"` + ended + `"}}]}`, 409, "owner_not_current"},
		{"owner of a dead member's temporary epoch", "POST", "/v1/txn", `{"ops":[{"op":"create","path":"/x","kind":"task","owner":{"node":1,"epoch":"` + temporary + `"}}]}`, 409, "owner_not_current"},
		{"PUT owner of an unknown member", "PUT", "/v1/catalog/x", `{"kind":"task","owner":{"node":7}}`, 404, "not_found"},
		{"txn owner of an unknown member", "POST", "/v1/txn", `{"ops":[{"op":"create","path":"/x","kind":"task","owner":{"node":7,"epoch":"` + current + `"}}]}`, 404, "not_found"},
		{"PUT if_epoch of an ended epoch", "PUT", "/v1/catalog/x", `{"kind":"task","if_epoch":{"node":1,"epoch":"` + ended + `"}}`, 409, "conflict"},
		{"txn if_epoch of an ended epoch", "POST", "/v1/txn", `{"if_epoch":{"node":1,"epoch":"` + ended + `"},"ops":[{"op":"create","path":"/x","kind":"task"}]}`, 409, "conflict"},
		{"if_epoch of an unknown member", "POST", "/v1/txn", `{"if_epoch":{"node":7,"epoch":"` + current + `"},"ops":[{"op":"create","path":"/x","kind":"task"}]}`, 409, "conflict"},
		{"if_epoch without an epoch", "POST", "/v1/txn", `{"if_epoch":{"node":1},"ops":[{"op":"create","path":"/x","kind":"task"}]}`, 400, "bad_request"},
		{"owner without a node", "PUT", "/v1/catalog/x", `{"kind":"task","owner":{"epoch":"` + current + `"}}`, 400, "bad_request"},
		{"owner with a bad epoch", "PUT", "/v1/catalog/x", `{"kind":"task","owner":{"node":1,"epoch":"nope"}}`, 400, "bad_request"},
		{"unknown on_owner_lost", "PUT", "/v1/catalog/x", `{"kind":"task","owner":{"node":1},"on_owner_lost":"keep"}`, 400, "bad_request"},
		{"on_owner_lost without an owner", "POST", "/v1/txn", `{"ops":[{"op":"create","path":"/x","kind":"task","on_owner_lost":"orphan"}]}`, 400, "bad_request"},
		{"owner on an update", "POST", "/v1/txn", `{"ops":[{"op":"update","path":"/x","owner":{"node":1}}]}`, 400, "bad_request"},
		{"the former owner shape", "POST", "/v1/txn", `{"ops":[{"op":"create","path":"/x","kind":"task","owner":{"member":1,"epoch":"` + current + `"}}]}`, 400, "bad_request"},
		{"the former orphan flag", "POST", "/v1/txn", `{"ops":[{"op":"create","path":"/x","kind":"task","owner":{"node":1,"orphan":true}}]}`, 400, "bad_request"},
		{"the former fence", "POST", "/v1/txn", `{"fence":{"member":1,"epoch":"` + current + `"},"ops":[{"op":"create","path":"/x","kind":"task"}]}`, 400, "bad_request"},
	} {
		code, out := serve(tc.method, tc.path, tc.body)
		require.Equal(t, tc.status, code, "%s: %v", tc.name, out)
		require.Equal(t, tc.code, out["error"], "%s: %v", tc.name, out)
	}
	_, ok := f.Tree().Get("/x")
	require.False(t, ok, "no refused write applied")

	code, out := serve("POST", "/v1/txn", `{"if_epoch":{"node":1,"epoch":"`+current+`"},"ops":[{"op":"create","path":"/x","kind":"task","owner":{"node":1,"epoch":"`+current+`"}}]}`)
	require.Equal(t, http.StatusOK, code, "%v", out)
	code, out = serve("PUT", "/v1/catalog/x", `{"attrs":{"n":1},"if_epoch":{"node":1,"epoch":"`+current+`"}}`)
	require.Equal(t, http.StatusOK, code, "an update fenced on the current epoch applies: %v", out)
	_, ok = f.Tree().Owned("/x")
	require.True(t, ok, "the current epoch owns the node, and the update kept it owned")

	// A user op that fails is named as the client counts its ops, not
	// counting the checks put before them.
	code, out = serve("POST", "/v1/txn", `{"if_epoch":{"node":1,"epoch":"`+current+`"},"ops":[{"op":"create","path":"/y","kind":"task","owner":{"node":1}},{"op":"check","path":"/nope"}]}`)
	require.Equal(t, http.StatusConflict, code, "%v", out)
	require.Contains(t, out["message"], "op 1 (check", "%v", out)
}

// An orphan mark reads as catalog.ParseOrphanMark says; the catalog's
// cascade writes it (see catalog's tests), and a node view shows it as
// an attribute.
func TestNodeViewShowsTheOrphanMarkAsOneStringAttribute(t *testing.T) {
	f, serve := ownerLeader(t)
	code, out := serve("PUT", "/v1/catalog/m", `{"kind":"member"}`)
	require.Equal(t, http.StatusOK, code, "%v", out)
	m, _ := f.Tree().Get("/m")
	res, err := f.Write(t.Context(), catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/k", Kind: "task", Owner: catalog.Owner{Path: "/m", Version: m.Modified, Orphan: true}}}})
	require.NoError(t, err, "%v", res)
	code, out = serve("PUT", "/v1/catalog/m", `{"attrs":{"gen":2}}`)
	require.Equal(t, http.StatusOK, code, "%v", out)
	end := out["index"].(float64)
	code, out = serve("GET", "/v1/catalog/k", "")
	require.Equal(t, http.StatusOK, code, "%v", out)
	mark := out["attrs"].(map[string]any)["_orphaned"].(string)
	index, reason, err := catalog.ParseOrphanMark(mark)
	require.NoError(t, err)
	require.Equal(t, uint64(end), index)
	require.Equal(t, catalog.OrphanOwnerChanged, reason)
	require.Nil(t, out["owner"], "a marked node is no longer owned")
}

// A worker cut off until it is declared dead, whose process runs on and
// answers again: through the API, an owner or an if_epoch naming the
// epoch declared dead stays refused (409 owner_not_current, 409
// conflict), the node it owned stays gone, and the worker works again
// with the fresh epoch it drew, which GET /v1/members shows.
func TestOwnerOfAnEpochDeclaredDeadIsRefusedAfterTheWorkerReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	f, err := Start(ctx, Config{Config: fe.Config{ID: 1, Dir: filepath.Join(t.TempDir(), "1"), Addr: freeAddr(t), Bootstrap: true, Insecure: true,
		HeartbeatInterval: 50 * time.Millisecond}})
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	waitFor(t, 20*time.Second, "a leader", func() bool { return f.Journal().Status().Leader == 1 })
	require.NoError(t, f.Journal().WaitClusterVersion(ctx, journal.NewestVersion))
	serve := func(method, path, body string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		f.routes().ServeHTTP(rec, httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body)))
		var out map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), "%s %s %s: %s", method, path, body, rec.Body.String())
		return rec.Code, out
	}

	// The worker: a heartbeat responder behind a switch that cuts it off.
	r, err := responder.New(responder.Config{ID: 101, Epoch: epoch.New()})
	require.NoError(t, err)
	var cut atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if cut.Load() {
			http.Error(w, "cut off", http.StatusServiceUnavailable)
			return
		}
		r.ServeHTTP(w, req)
	}))
	defer srv.Close()
	require.NoError(t, f.Members().Add(ctx, heartbeat.Member{ID: 101, Addr: strings.TrimPrefix(srv.URL, "http://"), Kind: epoch.KindWorker}))
	old := r.Epoch()
	waitFor(t, 20*time.Second, "the worker's epoch recorded", func() bool {
		m, ok := f.Members().Member(101)
		return ok && m.Epoch == old && m.Status == heartbeat.StatusAlive
	})
	owner := `"owner":{"node":101,"epoch":"` + old.String() + `"}`
	code, out := serve("PUT", "/v1/catalog/a", `{"kind":"task",`+owner+`}`)
	require.Equal(t, http.StatusOK, code, "%v", out)

	cut.Store(true)
	waitFor(t, 20*time.Second, "the worker declared dead", func() bool {
		m, _ := f.Members().Member(101)
		return m.Status == heartbeat.StatusDead
	})
	cut.Store(false)
	waitFor(t, 20*time.Second, "the worker back", func() bool {
		m, _ := f.Members().Member(101)
		return m.Status == heartbeat.StatusAlive
	})

	code, out = serve("PUT", "/v1/catalog/b", `{"kind":"task",`+owner+`}`)
	require.Equal(t, http.StatusConflict, code, "%v", out)
	require.Equal(t, "owner_not_current", out["error"], "%v", out)
	code, out = serve("POST", "/v1/txn", `{"if_epoch":{"node":101,"epoch":"`+old.String()+`"},"ops":[{"op":"create","path":"/c","kind":"task"}]}`)
	require.Equal(t, http.StatusConflict, code, "%v", out)
	require.Equal(t, "conflict", out["error"], "%v", out)
	code, _ = serve("GET", "/v1/catalog/a", "")
	require.Equal(t, http.StatusNotFound, code, "the node the death ended stays gone")

	fresh := r.Epoch()
	require.NotEqual(t, old, fresh, "the worker drew a fresh epoch")
	m, _ := f.Members().Member(101)
	require.Equal(t, fresh, m.Epoch)
	code, out = serve("PUT", "/v1/catalog/d", `{"kind":"task","owner":{"node":101,"epoch":"`+fresh.String()+`"}}`)
	require.Equal(t, http.StatusOK, code, "the fresh epoch owns: %v", out)
	var members []map[string]any
	rec := httptest.NewRecorder()
	f.routes().ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "GET", "/v1/members", nil))
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &members))
	var shown string
	for _, m := range members {
		if m["id"] == 101.0 {
			shown, _ = m["epoch"].(string)
		}
	}
	require.Equal(t, fresh.String(), shown)
}
