package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/journal"
)

// ownedView is a node as GET /v1/catalog shows it, with its owner.
type ownedView struct {
	Path  string         `json:"path"`
	Attrs map[string]any `json:"attrs"`
	Owner *struct {
		Node  uint64 `json:"node"`
		Epoch string `json:"epoch"`
	} `json:"owner"`
	OnOwnerLost string `json:"on_owner_lost"`
}

// workerEpoch returns worker id's epoch as the member list of p shows it
// while the worker is alive ("" otherwise).
func workerEpoch(t *testing.T, p *proc, id uint64) string {
	var ms []memberView
	if call(t, "GET", p.url("/v1/members"), nil, &ms) != http.StatusOK {
		return ""
	}
	for _, m := range ms {
		if m.ID == id && m.Status == "alive" {
			return m.Epoch
		}
	}
	return ""
}

// TestOwnedNodesGoWhenTheWorkerProcessRestarts drives the binaries over
// HTTP: a txn creates a task owned by worker 101's epoch (and one kept
// orphaned), the worker process is killed and started again with a new
// epoch, and the task is deleted on every frontend at the index of that
// restart, which a watch shows as an ordinary delete, and the kept one
// gains the attribute _orphaned = "<index> <reason>"; a write with
// if_epoch on the old epoch then answers 409 conflict, and one owned by
// it 409 owner_not_current, through every frontend.
func TestOwnedNodesGoWhenTheWorkerProcessRestarts(t *testing.T) {
	c, leader, all := threeFrontends(t)
	w := c.worker(101)
	require200(t, call(t, "POST", leader.url("/v1/members"), map[string]any{"id": 101, "addr": w.addr, "kind": "worker"}, nil), "add worker 101")
	var old string
	eventually(t, 10*time.Second, "worker 101 alive with an epoch", func() bool {
		old = workerEpoch(t, leader, 101)
		return old != ""
	})

	owned := func(path string, orphan bool) map[string]any {
		op := map[string]any{"op": "create", "path": path, "kind": "task", "owner": map[string]any{"node": 101, "epoch": old}}
		if orphan {
			op["on_owner_lost"] = "orphan"
		}
		return op
	}
	txn := map[string]any{"ops": []map[string]any{
		{"op": "create", "path": "/tasks", "kind": "dir"}, owned("/tasks/t1", false), owned("/tasks/kept", true),
	}}
	eventually(t, 10*time.Second, "the cluster version that owned nodes need", func() bool {
		var st struct {
			ClusterVersion uint32 `json:"cluster_version"`
		}
		return call(t, "GET", leader.url("/v1/status"), nil, &st) == http.StatusOK && st.ClusterVersion >= journal.NewestVersion
	})
	var created struct {
		Index uint64 `json:"index"`
	}
	require200(t, call(t, "POST", leader.url("/v1/txn"), txn, &created), "create the owned tasks")
	for _, p := range all {
		var v ownedView
		eventually(t, 10*time.Second, "the task on "+p.name, func() bool {
			return call(t, "GET", p.url("/v1/catalog/tasks/t1"), nil, &v) == http.StatusOK
		})
		require.NotNil(t, v.Owner, "%s shows the task's owner", p.name)
		require.Equal(t, uint64(101), v.Owner.Node)
		require.Equal(t, old, v.Owner.Epoch)
		require.Equal(t, "delete", v.OnOwnerLost)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	follower := all[0]
	if follower == leader {
		follower = all[1]
	}
	resp, sc := openWatch(t, ctx, streamClient, follower, fmt.Sprintf("prefix=/tasks&from_index=%d", created.Index))
	defer resp.Body.Close()

	w.kill()
	w.start() // a new process at the same address, a new epoch
	var gone, marked watchLine
	for gone.Index == 0 || marked.Index == 0 {
		l, ok := nextLine(t, sc)
		require.True(t, ok, "the watch ended before the tasks went: %v", ctx.Err())
		require.Empty(t, l.Error)
		switch {
		case l.Type == "delete" && l.Path == "/tasks/t1":
			gone = l
		case l.Type == "update" && l.Path == "/tasks/kept":
			marked = l
		case l.Progress != 0:
		default:
			t.Fatalf("unexpected watch line %+v", l)
		}
	}
	require.Equal(t, gone.Index, marked.Index, "the deletion and the orphan mark are one apply")
	require.Equal(t, fmt.Sprintf("%d %s", gone.Index, catalog.OrphanOwnerChanged), marked.Attrs["_orphaned"], "the mark names the restart's index")
	require.NotEqual(t, old, workerEpoch(t, follower, 101), "the worker runs with a new epoch")

	for _, p := range all {
		eventually(t, 10*time.Second, p.name+" applies the restart", func() bool {
			st, ok := getStatus(t, p)
			return ok && st.Applied >= gone.Index
		})
		require.Equal(t, http.StatusNotFound, call(t, "GET", p.url("/v1/catalog/tasks/t1"), nil, nil), "%s still holds the task", p.name)
		var kept ownedView
		require200(t, call(t, "GET", p.url("/v1/catalog/tasks/kept"), nil, &kept), "the kept task on "+p.name)
		require.Equal(t, fmt.Sprintf("%d %s", gone.Index, catalog.OrphanOwnerChanged), kept.Attrs["_orphaned"])
		require.Nil(t, kept.Owner, "a marked node is no longer owned")

		for _, tc := range []struct {
			method, path string
			body         map[string]any
			code         string
		}{
			{"POST", "/v1/txn", map[string]any{"if_epoch": map[string]any{"node": 101, "epoch": old}, "ops": []map[string]any{{"op": "create", "path": "/tasks/late", "kind": "task"}}}, "conflict"},
			{"PUT", "/v1/catalog/tasks/late", map[string]any{"kind": "task", "if_epoch": map[string]any{"node": 101, "epoch": old}}, "conflict"},
			{"POST", "/v1/txn", map[string]any{"ops": []map[string]any{owned("/tasks/late", false)}}, "owner_not_current"},
			{"PUT", "/v1/catalog/tasks/late", map[string]any{"kind": "task", "owner": map[string]any{"node": 101, "epoch": old}}, "owner_not_current"},
		} {
			var e apiError
			require.Equal(t, http.StatusConflict, call(t, tc.method, p.url(tc.path), tc.body, &e), "%s %s through %s: %+v", tc.method, tc.path, p.name, e)
			require.Equal(t, tc.code, e.Error, "%s %s through %s: %s", tc.method, tc.path, p.name, e.Message)
		}
	}
	require.Equal(t, http.StatusNotFound, call(t, "GET", leader.url("/v1/catalog/tasks/late?consistency=linearizable"), nil, nil), "no refused txn applied")

	// Without an epoch, the owner is the epoch the worker runs with when
	// the batch applies: the new one.
	current := workerEpoch(t, follower, 101)
	require200(t, call(t, "PUT", follower.url("/v1/catalog/tasks/next"), map[string]any{"kind": "task", "owner": map[string]any{"node": 101}}, nil), "a task owned by the running epoch")
	var next ownedView
	require200(t, call(t, "GET", follower.url("/v1/catalog/tasks/next"), nil, &next), "the new task")
	require.NotNil(t, next.Owner)
	require.Equal(t, current, next.Owner.Epoch, "owned by the epoch the worker runs with now")
}
