package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestQueryFromFollowerAfterLeaderRestart: after the leader is killed and
// restarted, an observer joins and two workers are added through the new
// leader, a query coordinated by any follower, the restarted former leader
// included, reaches both workers and runs there.
func TestQueryFromFollowerAfterLeaderRestart(t *testing.T) {
	c := newCluster(t)
	fe1 := c.metaserver(1, "-bootstrap")
	c.waitLeader(15*time.Second, fe1)
	fe2 := c.metaserver(2, "-join", fe1.addr)
	c.waitLeader(20*time.Second, fe1, fe2)
	fe3 := c.metaserver(3, "-join", fe1.addr)
	voters := []*proc{fe1, fe2, fe3}
	leader := c.waitLeader(20*time.Second, voters...)

	leader.kill()
	c.restart(leader)
	leader = c.waitLeader(20*time.Second, voters...)
	obs := c.metaserver(4, "-join", leader.addr, "-role", "observer")
	all := append(voters, obs)
	leader = c.waitLeader(20*time.Second, all...)

	w11, w12 := c.worker(11), c.worker(12)
	for _, w := range []*proc{w11, w12} {
		var id int
		fmt.Sscanf(w.name, "worker-%d", &id)
		body := map[string]any{"id": id, "addr": w.addr, "kind": "worker"}
		if code := call(t, "POST", leader.url("/v1/members"), body, nil); code != http.StatusOK {
			t.Fatalf("adding worker %d through the leader: status %d", id, code)
		}
	}
	eventually(t, 10*time.Second, "both workers alive on the leader", func() bool {
		var ms []memberView
		if call(t, "GET", leader.url("/v1/members"), nil, &ms) != http.StatusOK {
			return false
		}
		alive := 0
		for _, m := range ms {
			if m.Kind == "worker" && m.Status == "alive" {
				alive++
			}
		}
		return alive == 2
	})

	for i, coord := range all {
		if coord == leader {
			continue
		}
		id := fmt.Sprintf("q%d", i+1)
		var e apiError
		body := map[string]any{"id": id, "workers": []int{11, 12}, "duration_ms": 120000}
		if code := call(t, "POST", coord.url("/v1/queries"), body, &e); code != http.StatusOK {
			t.Fatalf("query %s on %s: status %d %s: %s", id, coord.name, code, e.Error, e.Message)
		}
		eventually(t, 5*time.Second, "the fragments of "+id+" running on both workers", func() bool {
			return fragmentState(t, w11, id) == "running" && fragmentState(t, w12, id) == "running"
		})
	}

	// Removed, the observer hears of no worker's change any more: it
	// coordinates no new query, though it still knows both workers.
	if code := call(t, "DELETE", leader.url("/v1/members/4"), nil, nil); code != http.StatusOK {
		t.Fatalf("removing the observer: status %d", code)
	}
	eventually(t, 10*time.Second, "the observer refusing writes as removed", func() bool {
		var e apiError
		return call(t, "PUT", obs.url("/v1/catalog/after-removal"), map[string]any{"kind": "database"}, &e) == http.StatusGone
	})
	var e apiError
	body := map[string]any{"id": "on-removed", "workers": []int{11, 12}, "duration_ms": 120000}
	if code := call(t, "POST", obs.url("/v1/queries"), body, &e); code != http.StatusGone || e.Error != "removed" {
		t.Fatalf("a query on the removed observer: status %d %+v, want 410 removed", code, e)
	}
}
