package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestPutThroughALaggingFollowerUpdates: a PUT creates the node or updates
// it, whatever the frontend it reaches has applied yet. A follower whose
// traffic from the leader is delayed has not seen a node the leader just
// created; a PUT of that node through it updates the node (200, its
// value wins) rather than answering 409 exists.
func TestPutThroughALaggingFollowerUpdates(t *testing.T) {
	n := &nemesis{t: t, c: newCluster(t), net: newNetem(t)}
	m1 := n.member(1, 1, "-bootstrap")
	n.c.waitLeader(30*time.Second, m1)
	m2 := n.member(2, 2, "-join", m1.addr)
	m3 := n.member(3, 3, "-join", m1.addr)
	n.voters = []*proc{m1, m2, m3}
	leader := n.c.waitLeader(30*time.Second, n.voters...)
	follower := n.follower(leader)
	require200(t, call(t, "PUT", leader.url("/v1/catalog/kv"), map[string]any{"kind": "dir"}, nil), "create /kv")
	eventually(t, 10*time.Second, "/kv on the follower", func() bool {
		return call(t, "GET", follower.url("/v1/catalog/kv"), nil, nil) == http.StatusOK
	})

	n.net.set(linkRule{delay: 500 * time.Millisecond}, netLink{leader.name, follower.name})
	for i := range 3 {
		key := fmt.Sprintf("/v1/catalog/kv/x%d", i)
		require200(t, call(t, "PUT", leader.url(key), map[string]any{"kind": "key", "attrs": map[string]any{"v": "leader"}}, nil), "PUT through the leader")
		var e apiError
		if code := call(t, "PUT", follower.url(key), map[string]any{"kind": "key", "attrs": map[string]any{"v": "follower"}}, &e); code != http.StatusOK {
			t.Fatalf("PUT %s through a follower that has not applied its creation: %d %+v, want 200", key, code, e)
		}
		var got nodeView
		require200(t, call(t, "GET", leader.url(key+"?consistency=linearizable"), nil, &got), "read back")
		if got.Attrs["v"] != "follower" {
			t.Fatalf("%s = %v after the follower's PUT, want v=follower", key, got.Attrs)
		}
	}
}
