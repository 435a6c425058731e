package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRemoveLeader removes the leader through DELETE /v1/members twice:
// once asking the leader itself, once asking a follower. Each time the
// request succeeds, the others elect a leader among themselves that has
// every acknowledged write and takes new ones, the member list drops the
// removed frontend (a second DELETE finds none), and the removed process
// refuses reads and writes with 410 and reports itself not ready.
func TestRemoveLeader(t *testing.T) {
	c := newCluster(t)
	fe1 := c.metaserver(1, "-bootstrap")
	c.waitLeader(15*time.Second, fe1)
	fe2 := c.metaserver(2, "-join", fe1.addr)
	c.waitLeader(20*time.Second, fe1, fe2)
	fe3 := c.metaserver(3, "-join", fe1.addr)
	c.waitLeader(20*time.Second, fe1, fe2, fe3)
	fe4 := c.metaserver(4, "-join", fe1.addr)
	live := []*proc{fe1, fe2, fe3, fe4}
	c.waitLeader(20*time.Second, live...)

	written := []string{}
	write := func(p *proc, name string) {
		t.Helper()
		if code := call(t, "PUT", p.url("/v1/catalog/"+name), map[string]any{"kind": "database"}, nil); code != http.StatusOK {
			t.Fatalf("PUT /%s on %s: status %d", name, p.name, code)
		}
		written = append(written, name)
	}
	write(fe2, "before")

	for round, via := range []string{"leader", "follower"} {
		leader := c.waitLeader(20*time.Second, live...)
		ask := leader
		if via == "follower" {
			ask = live[slices.IndexFunc(live, func(p *proc) bool { return p != leader })]
		}
		var id uint64
		fmt.Sscan(strings.TrimPrefix(leader.name, "metaserver-"), &id)
		var del deleteAnswer
		if code := call(t, "DELETE", ask.url(fmt.Sprintf("/v1/members/%d", id)), nil, &del); code != http.StatusOK || del.ID != id {
			t.Fatalf("round %d: DELETE the leader %d through the %s: status %d %+v", round, id, via, code, del)
		}
		// Removed, the leader can no longer remove its own record: the
		// next leader does.
		if (via == "leader") != (del.Pending != "") {
			t.Errorf("round %d: DELETE through the %s: pending %q", round, via, del.Pending)
		}
		live = slices.DeleteFunc(live, func(p *proc) bool { return p == leader })

		next := c.waitLeader(20*time.Second, live...)
		if next == leader {
			t.Fatalf("round %d: the removed %s still leads", round, leader.name)
		}
		eventually(t, 10*time.Second, "the member list without the removed frontend", func() bool {
			var ms []memberView
			if call(t, "GET", next.url("/v1/members"), nil, &ms) != http.StatusOK {
				return false
			}
			return !slices.ContainsFunc(ms, func(m memberView) bool { return m.ID == id })
		})
		// Done once: a second DELETE finds no such member.
		if code := call(t, "DELETE", next.url(fmt.Sprintf("/v1/members/%d", id)), nil, nil); code != http.StatusNotFound {
			t.Fatalf("round %d: DELETE of the removed member %d again: status %d, want 404", round, id, code)
		}
		write(live[len(live)-1], fmt.Sprintf("after%d", round))
		for _, p := range live {
			for _, name := range written {
				if code := call(t, "GET", p.url("/v1/catalog/"+name+"?consistency=linearizable"), nil, nil); code != http.StatusOK {
					t.Fatalf("round %d: linearizable GET /%s on %s: status %d", round, name, p.name, code)
				}
			}
		}

		// The removed process is up, and refuses.
		var e apiError
		if code := call(t, "PUT", leader.url("/v1/catalog/refused"), map[string]any{"kind": "database"}, &e); code != http.StatusGone || e.Error != "removed" {
			t.Fatalf("round %d: PUT on the removed %s: status %d %+v, want 410 removed", round, leader.name, code, e)
		}
		e = apiError{}
		if code := call(t, "GET", leader.url("/v1/catalog/before?consistency=linearizable"), nil, &e); code != http.StatusGone || e.Error != "removed" {
			t.Fatalf("round %d: linearizable GET on the removed %s: status %d %+v, want 410 removed", round, leader.name, code, e)
		}
		var ready struct {
			Ready  bool   `json:"ready"`
			Reason string `json:"reason"`
		}
		if code := call(t, "GET", leader.url("/readyz"), nil, &ready); code != http.StatusServiceUnavailable {
			t.Fatalf("round %d: /readyz of the removed %s: status %d", round, leader.name, code)
		}
	}
}

// TestUnsafeRemoval removes a live voter while another is down: refused
// with 409 unsafe_removal and nothing changed, then done with ?force=true,
// after which the cluster has no quorum (writes answer 503) until the
// down voter comes back.
func TestUnsafeRemoval(t *testing.T) {
	c := newCluster(t)
	short := []string{"-request-timeout", "2s"}
	fe1 := c.metaserver(1, append([]string{"-bootstrap"}, short...)...)
	c.waitLeader(15*time.Second, fe1)
	fe2 := c.metaserver(2, append([]string{"-join", fe1.addr}, short...)...)
	c.waitLeader(20*time.Second, fe1, fe2)
	fe3 := c.metaserver(3, append([]string{"-join", fe1.addr}, short...)...)
	leader := c.waitLeader(20*time.Second, fe1, fe2, fe3)

	// The leader and one more stay up; the third goes down.
	var up, down *proc
	for _, p := range []*proc{fe1, fe2, fe3} {
		switch {
		case p == leader:
		case down == nil:
			down = p
		default:
			up = p
		}
	}
	// lastHeard returns how long ago the leader's heartbeats last heard
	// from p (ok false: never).
	lastHeard := func(p *proc) (ms int64, ok bool) {
		var members []struct {
			ID              uint64 `json:"id"`
			LastHeartbeatMS *int64 `json:"last_heartbeat_ms"`
		}
		if call(t, "GET", leader.url("/v1/members"), nil, &members) != http.StatusOK {
			return 0, false
		}
		for _, m := range members {
			if fmt.Sprintf("metaserver-%d", m.ID) == p.name && m.LastHeartbeatMS != nil {
				return *m.LastHeartbeatMS, true
			}
		}
		return 0, false
	}
	// Heard from before it goes down, so that its silence can be seen.
	eventually(t, 20*time.Second, down.name+" answering heartbeats", func() bool {
		_, ok := lastHeard(down)
		return ok
	})
	down.kill()
	// Gone for longer than the leader's election timeout (1s): no longer
	// reachable to it, as its heartbeat monitor sees too.
	eventually(t, 20*time.Second, down.name+" silent for over 1.5s", func() bool {
		ms, ok := lastHeard(down)
		return ok && ms > 1500
	})
	upID := strings.TrimPrefix(up.name, "metaserver-")

	var e apiError
	if code := call(t, "DELETE", leader.url("/v1/members/"+upID), nil, &e); code != http.StatusConflict || e.Error != "unsafe_removal" {
		t.Fatalf("DELETE of a live voter with another down: status %d %+v, want 409 unsafe_removal", code, e)
	}
	if !strings.Contains(e.Message, "reachable") {
		t.Errorf("the refusal does not say why: %q", e.Message)
	}
	// Nothing changed: the two up still commit.
	if code := call(t, "PUT", up.url("/v1/catalog/still"), map[string]any{"kind": "database"}, nil); code != http.StatusOK {
		t.Fatalf("PUT after the refused removal: status %d", code)
	}

	// The removal commits (two of three voters are up), the record's
	// removal cannot (one of two): pending, for the next leader.
	var del deleteAnswer
	if code := call(t, "DELETE", leader.url("/v1/members/"+upID+"?force=true"), nil, &del); code != http.StatusOK || del.Pending == "" {
		t.Fatalf("forced DELETE: status %d %+v, want 200 with the record pending", code, del)
	}
	// The voters left are the leader and the one down: no quorum.
	e = apiError{}
	if code := call(t, "PUT", leader.url("/v1/catalog/stuck"), map[string]any{"kind": "database"}, &e); code != http.StatusServiceUnavailable {
		t.Fatalf("PUT without a quorum: status %d %+v, want 503", code, e)
	}

	c.restart(down)
	eventually(t, 30*time.Second, "a write after the down voter is back", func() bool {
		return call(t, "PUT", leader.url("/v1/catalog/back"), map[string]any{"kind": "database"}, nil) == http.StatusOK
	})
	for _, p := range []*proc{leader, down} {
		if code := call(t, "GET", p.url("/v1/catalog/still?consistency=linearizable"), nil, nil); code != http.StatusOK {
			t.Fatalf("linearizable GET /still on %s: status %d", p.name, code)
		}
	}
	eventually(t, 10*time.Second, "the member list without "+up.name, func() bool {
		var ms []memberView
		if call(t, "GET", leader.url("/v1/members"), nil, &ms) != http.StatusOK {
			return false
		}
		return !slices.ContainsFunc(ms, func(m memberView) bool { return fmt.Sprint(m.ID) == upID })
	})
	e = apiError{}
	if code := call(t, "PUT", up.url("/v1/catalog/refused"), map[string]any{"kind": "database"}, &e); code != http.StatusGone {
		t.Fatalf("PUT on the removed %s: status %d %+v, want 410", up.name, code, e)
	}
}

// deleteAnswer is the body of a successful DELETE /v1/members/<id>.
type deleteAnswer struct {
	ID      uint64 `json:"id"`
	Pending string `json:"pending"`
}
