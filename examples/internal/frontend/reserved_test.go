package frontend

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
)

// TestHTTPWritesUnderTheClusterRecordsAreRefused: a txn, a PUT and a
// DELETE that write under /_cluster answer 400 bad_request naming the
// reserved path and never reach the log, a txn that only checks there
// passes, and the frontend's own member record is intact.
func TestHTTPWritesUnderTheClusterRecordsAreRefused(t *testing.T) {
	f, ctx := startLeader(t)

	serve := func(method, target, body string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		f.routes().ServeHTTP(rec, httptest.NewRequestWithContext(ctx, method, target, strings.NewReader(body)))
		var out map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), "%s %s: %s", method, target, rec.Body.String())
		return rec.Code, out
	}
	before := f.Journal().Status().Applied
	for _, tc := range []struct{ method, target, body string }{
		{"POST", "/v1/txn", `{"ops":[{"op":"delete","path":"/_cluster","recursive":true}]}`},
		{"POST", "/v1/txn", `{"ops":[{"op":"create","path":"/ok","kind":"dir"},{"op":"update","path":"/_cluster/members/1","attrs":{"addr":"x:1"}}]}`},
		{"POST", "/v1/txn", `{"ops":[{"op":"create","path":"_cluster/members/99","kind":"member"}]}`},
		{"PUT", "/v1/catalog/_cluster/members/99", `{"kind":"member"}`},
		{"DELETE", "/v1/catalog/_cluster?recursive=true", ``},
	} {
		code, out := serve(tc.method, tc.target, tc.body)
		require.Equal(t, http.StatusBadRequest, code, "%s %s %s: %v", tc.method, tc.target, tc.body, out)
		require.Equal(t, "bad_request", out["error"], "%v", out)
		require.Contains(t, out["message"], "reserved", "%v", out)
		require.Contains(t, out["message"], "_cluster", "%v", out)
	}
	// The frontend's own work (its monitor's member records) goes on
	// beside the requests: what reached the log meanwhile holds none of
	// their writes.
	after := f.Journal().Status().Applied
	require.NoError(t, f.Journal().ReadEntries(ctx, before, after, func(index uint64, data []byte) error {
		b, err := catalog.DecodeBatch(data)
		require.NoError(t, err, "entry %d", index)
		for _, op := range b.Ops {
			addr, _ := op.Set["addr"].AsString()
			refused := op.Path == "/ok" || strings.HasSuffix(op.Path, "/members/99") ||
				(op.Type == catalog.OpDelete && op.Path == "/_cluster") || addr == "x:1"
			require.False(t, refused, "a refused write reached the log at %d: %+v", index, op)
		}
		return nil
	}))
	_, ok := f.Tree().Get("/ok")
	require.False(t, ok, "the refused txn's create of /ok was applied")

	code, out := serve("POST", "/v1/txn", `{"ops":[{"op":"check","path":"/_cluster/members/1"},{"op":"create","path":"/ok","kind":"dir"}]}`)
	require.Equal(t, http.StatusOK, code, "%v", out)
	_, ok = f.Tree().Get(heartbeat.MembersPath + "/1")
	require.True(t, ok, "the frontend's own record is intact")
}
