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
		var e apiError
		if code := call(t, "DELETE", ask.url(fmt.Sprintf("/v1/members/%d", id)), nil, &e); code != http.StatusOK {
			t.Fatalf("round %d: DELETE the leader %d through the %s: status %d %+v", round, id, via, code, e)
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
		e = apiError{}
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
