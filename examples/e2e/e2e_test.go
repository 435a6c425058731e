// Package e2e drives the example binaries as separate processes on
// 127.0.0.1, through the interface in examples/API.md.
package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestCluster builds a cluster of real processes and walks it through the
// failures a deployment meets: a write through a follower, a worker killed
// under a query, a coordinator restarted under its fragments, the leader
// killed, and a node joining after the log was compacted.
func TestCluster(t *testing.T) {
	c := newCluster(t)
	fe1 := c.metaserver(1, "-bootstrap", "-checkpoint-entries", "1000000")
	c.waitLeader(15*time.Second, fe1)
	// Members join one at a time, each through a different helper, as an
	// operator adds them.
	fe2 := c.metaserver(2, "-join", fe1.addr)
	c.waitLeader(20*time.Second, fe1, fe2)
	fe3 := c.metaserver(3, "-join", fe2.addr)
	c.waitLeader(20*time.Second, fe1, fe2, fe3)
	obs := c.metaserver(4, "-join", fe3.addr, "-role", "observer")
	all := []*proc{fe1, fe2, fe3, obs}
	c.waitLeader(20*time.Second, all...)

	st, _ := getStatus(t, obs)
	if st.Role != "observer" || st.State != "learner" {
		t.Fatalf("observer status = role %q state %q, want observer/learner", st.Role, st.State)
	}

	w101, w102 := c.worker(101), c.worker(102)
	for _, w := range []*proc{w101, w102} {
		var id int
		fmt.Sscan(strings.TrimPrefix(w.name, "worker-"), &id)
		body := map[string]any{"id": id, "addr": w.addr, "kind": "worker"}
		if code := call(t, "POST", fe3.url("/v1/members"), body, nil); code != http.StatusOK {
			t.Fatalf("adding worker %d: status %d", id, code)
		}
	}
	eventually(t, 10*time.Second, "workers alive in the member list", func() bool {
		var ms []memberView
		if call(t, "GET", obs.url("/v1/members"), nil, &ms) != http.StatusOK {
			return false
		}
		alive := 0
		for _, m := range ms {
			if m.Kind == "worker" && m.Status == "alive" && m.Epoch != "" {
				alive++
			}
		}
		return alive == 2
	})

	// acked records every write the cluster acknowledged, to check after
	// the leader's death that none was lost.
	acked := map[string]string{}

	t.Run("WriteThroughFollowerReadsBack", func(t *testing.T) {
		leader := c.waitLeader(10*time.Second, all...)
		follower := fe2
		if follower == leader {
			follower = fe3
		}
		var put struct {
			Index uint64   `json:"index"`
			Node  nodeView `json:"node"`
		}
		code := call(t, "PUT", follower.url("/v1/catalog/db1"), map[string]any{"kind": "database", "attrs": map[string]any{"owner": "alice"}}, &put)
		if code != http.StatusOK || put.Index == 0 {
			t.Fatalf("PUT through a follower: status %d, index %d", code, put.Index)
		}
		acked["/db1"] = "database"
		// Read-your-writes: the same follower shows it at once.
		var got nodeView
		if code := call(t, "GET", follower.url("/v1/catalog/db1"), nil, &got); code != http.StatusOK {
			t.Fatalf("GET on the follower right after its write: status %d", code)
		}
		if got.Kind != "database" || got.Attrs["owner"] != "alice" || got.Modified < put.Index {
			t.Fatalf("GET /db1 = %+v", got)
		}
		// The observer serves a linearizable read of it too.
		if code := call(t, "GET", obs.url("/v1/catalog/db1?consistency=linearizable"), nil, &got); code != http.StatusOK || got.Kind != "database" {
			t.Fatalf("linearizable GET on the observer: status %d, %+v", code, got)
		}
	})

	t.Run("TxnFindAndConflicts", func(t *testing.T) {
		txn := map[string]any{"ops": []map[string]any{
			{"op": "create", "path": "/db1/orders", "kind": "table"},
			{"op": "create", "path": "/db1/orders/t1", "kind": "tablet", "attrs": map[string]any{"worker": 101}},
			{"op": "create", "path": "/db1/orders/t2", "kind": "tablet", "attrs": map[string]any{"worker": 102}},
		}}
		var res struct {
			Index uint64 `json:"index"`
		}
		if code := call(t, "POST", fe1.url("/v1/txn"), txn, &res); code != http.StatusOK || res.Index == 0 {
			t.Fatalf("txn: status %d", code)
		}
		for _, p := range []string{"/db1/orders", "/db1/orders/t1", "/db1/orders/t2"} {
			acked[p] = "x"
		}
		var found []nodeView
		if code := call(t, "GET", fe1.url("/v1/find?kind=tablet&attr=worker&value=102"), nil, &found); code != http.StatusOK {
			t.Fatalf("find: status %d", code)
		}
		if len(found) != 1 || found[0].Path != "/db1/orders/t2" {
			t.Fatalf("find worker=102 = %+v, want /db1/orders/t2", found)
		}
		// A failed precondition applies nothing.
		bad := map[string]any{"ops": []map[string]any{
			{"op": "create", "path": "/db1/orders/t3", "kind": "tablet"},
			{"op": "check", "path": "/db1/orders", "if_modified": 1},
		}}
		var e apiError
		if code := call(t, "POST", fe2.url("/v1/txn"), bad, &e); code != http.StatusConflict || e.Error == "" {
			t.Fatalf("conflicting txn: status %d, %+v", code, e)
		}
		if code := call(t, "GET", fe2.url("/v1/catalog/db1/orders/t3"), nil, &e); code != http.StatusNotFound {
			t.Fatalf("half-applied txn: /db1/orders/t3 has status %d", code)
		}
		if code := call(t, "PUT", fe2.url("/v1/catalog/db1"), map[string]any{"kind": "database", "if_absent": true}, &e); code != http.StatusConflict {
			t.Fatalf("if_absent on an existing node: status %d", code)
		}
		// if_match (batch format 2: the cluster of one binary is at
		// version 6, which writes batch format 4) moves a node from one
		// attribute value to the next.
		var st map[string]any
		if code := call(t, "GET", fe2.url("/v1/status"), nil, &st); code != http.StatusOK || st["cluster_version"] != 6.0 {
			t.Fatalf("GET /v1/status: %d, cluster_version %v", code, st["cluster_version"])
		}
		move := func(match map[string]any, state string) map[string]any {
			return map[string]any{"ops": []map[string]any{
				{"op": "update", "path": "/db1/orders/t2", "if_match": match, "attrs": map[string]any{"state": state}},
			}}
		}
		if code := call(t, "POST", fe2.url("/v1/txn"), move(map[string]any{"worker": 102}, "running"), &res); code != http.StatusOK {
			t.Fatalf("txn if_match worker=102: status %d", code)
		}
		if code := call(t, "POST", fe3.url("/v1/txn"), move(map[string]any{"state": "running"}, "done"), &res); code != http.StatusOK {
			t.Fatalf("txn if_match state=running: status %d", code)
		}
		if code := call(t, "POST", fe3.url("/v1/txn"), move(map[string]any{"state": "running"}, "again"), &e); code != http.StatusConflict {
			t.Fatalf("txn if_match state=running once done: status %d, %+v", code, e)
		}
	})

	t.Run("BadRequests", func(t *testing.T) {
		var e apiError
		cases := []struct {
			method, path string
			body         any
			want         int
		}{
			{"PUT", "/v1/catalog/db9", "{not json", http.StatusBadRequest},
			{"PUT", "/v1/catalog/db9", `{"kind":"` + strings.Repeat("x", 8<<20) + `"}`, http.StatusRequestEntityTooLarge},
			{"POST", "/v1/txn", `{"ops":[{"op":"explode","path":"/x"}]}`, http.StatusBadRequest},
			{"PUT", "/v1/catalog/no/such/parent", `{"kind":"table"}`, http.StatusNotFound},
			{"GET", "/v1/catalog/nothing-here", nil, http.StatusNotFound},
			{"GET", "/v1/find?kind=tablet", nil, http.StatusBadRequest},
			{"POST", "/v1/members", `{"id":"x"}`, http.StatusBadRequest},
			{"POST", "/v1/queries", `[]`, http.StatusBadRequest},
			// The cluster's own records change only through /v1/members.
			{"DELETE", "/v1/catalog/_cluster?recursive=true", nil, http.StatusBadRequest},
			{"PUT", "/v1/catalog/_cluster/members/99", `{"kind":"member"}`, http.StatusBadRequest},
			{"POST", "/v1/txn", `{"ops":[{"op":"delete","path":"/_cluster","recursive":true}]}`, http.StatusBadRequest},
			{"POST", "/v1/members", `{"id":7,"addr":"127.0.0.1:1","kind":"frontend","role":"bogus"}`, http.StatusBadRequest},
			{"POST", "/v1/members", `{"id":7,"addr":"not an addr","kind":"worker"}`, http.StatusBadRequest},
			{"POST", "/v1/queries", `{"id":"qd","workers":[101,101],"duration_ms":1000}`, http.StatusBadRequest},
			{"POST", "/v1/queries", `{"id":"qo","workers":[101],"duration_ms":9223372036854775807}`, http.StatusBadRequest},
		}
		for _, tc := range cases {
			e = apiError{}
			code := call(t, tc.method, fe2.url(tc.path), tc.body, &e)
			if code != tc.want || e.Error == "" || e.Message == "" {
				t.Errorf("%s %s: status %d %+v, want %d with a JSON error", tc.method, tc.path, code, e, tc.want)
			}
		}
		// The servers are still up, and every member is still listed.
		c.waitLeader(5*time.Second, all...)
		var members []map[string]any
		if code := call(t, "GET", fe2.url("/v1/members"), nil, &members); code != http.StatusOK || len(members) < len(all)+2 {
			t.Fatalf("GET /v1/members: status %d, %d members", code, len(members))
		}
	})

	t.Run("WorkerKilledUnderQuery", func(t *testing.T) {
		const id = "q-kill/worker?x" // withdrawn by a URL that must escape it
		body := map[string]any{"id": id, "workers": []int{101, 102}, "duration_ms": 120000}
		if code := call(t, "POST", fe3.url("/v1/queries"), body, nil); code != http.StatusOK {
			t.Fatalf("start query: status %d", code)
		}
		eventually(t, 5*time.Second, "fragments running on both workers", func() bool {
			return fragmentState(t, w101, id) == "running" && fragmentState(t, w102, id) == "running"
		})
		start := time.Now()
		w101.kill()
		var q queryView
		eventually(t, 10*time.Second, "the query cancelled after its worker died", func() bool {
			call(t, "GET", fe3.url("/v1/queries/"+url.PathEscape(id)), nil, &q)
			return q.State == "cancelled"
		})
		// Its fragment on the surviving worker is withdrawn.
		eventually(t, 5*time.Second, "the fragment on worker 102 withdrawn", func() bool {
			return fragmentState(t, w102, id) == "cancelled"
		})
		t.Logf("query cancelled %v after worker 101 was killed: %s", time.Since(start).Round(time.Millisecond), q.Cause)
		if !strings.Contains(q.Cause, "101") {
			t.Fatalf("cause %q does not name worker 101", q.Cause)
		}
		w101.start() // a new process, a new epoch
	})

	t.Run("CoordinatorRestartCancelsFragments", func(t *testing.T) {
		leader := c.waitLeader(10*time.Second, all...)
		coord := fe2
		if coord == leader {
			coord = fe3
		}
		body := map[string]any{"id": "q-coord-restart", "workers": []int{102}, "duration_ms": 120000}
		if code := call(t, "POST", coord.url("/v1/queries"), body, nil); code != http.StatusOK {
			t.Fatalf("start query: status %d", code)
		}
		eventually(t, 5*time.Second, "the fragment running on worker 102", func() bool {
			return fragmentState(t, w102, "q-coord-restart") == "running"
		})
		coord.kill()
		c.restart(coord)
		eventually(t, 15*time.Second, "the fragment cancelled after its coordinator restarted", func() bool {
			return fragmentState(t, w102, "q-coord-restart") == "cancelled"
		})
		c.waitLeader(20*time.Second, all...)
	})

	t.Run("LeaderKilled", func(t *testing.T) {
		leader := c.waitLeader(10*time.Second, all...)
		// More acknowledged writes just before the kill.
		for i := 0; i < 20; i++ {
			p := fmt.Sprintf("/db1/k%d", i)
			if code := call(t, "PUT", leader.url("/v1/catalog"+p), map[string]any{"kind": "table"}, nil); code != http.StatusOK {
				t.Fatalf("PUT %s: status %d", p, code)
			}
			acked[p] = "table"
		}
		start := time.Now()
		leader.kill()
		var rest []*proc
		for _, p := range all {
			if p != leader {
				rest = append(rest, p)
			}
		}
		newLeader := c.waitLeader(10*time.Second, rest...)
		t.Logf("new leader %s after %v", newLeader.name, time.Since(start).Round(time.Millisecond))
		for p := range acked {
			if code := call(t, "GET", newLeader.url("/v1/catalog"+p+"?consistency=linearizable"), nil, nil); code != http.StatusOK {
				t.Errorf("acknowledged %s lost after failover: status %d", p, code)
			}
		}
		if code := call(t, "PUT", newLeader.url("/v1/catalog/db2"), map[string]any{"kind": "database"}, nil); code != http.StatusOK {
			t.Fatalf("write after failover: status %d", code)
		}
		c.restart(leader)
		target, _ := getStatus(t, newLeader)
		eventually(t, 20*time.Second, "the old leader caught up", func() bool {
			st, ok := getStatus(t, leader)
			return ok && st.Applied >= target.Applied
		})
		if code := call(t, "GET", leader.url("/v1/catalog/db2"), nil, nil); code != http.StatusOK {
			t.Fatalf("restarted node misses /db2: status %d", code)
		}
	})

	t.Run("JoinAfterCompactionRestoresImage", func(t *testing.T) {
		leader := c.waitLeader(10*time.Second, all...)
		// Two checkpoints: the second compacts the log up to the first.
		for round := range 2 {
			for i := range 50 {
				if code := call(t, "PUT", leader.url(fmt.Sprintf("/v1/catalog/db1/c%d", round*50+i)), map[string]any{"kind": "table"}, nil); code != http.StatusOK {
					t.Fatalf("PUT: status %d", code)
				}
			}
			for _, p := range all {
				var res struct {
					Index uint64 `json:"index"`
				}
				if code := call(t, "POST", p.url("/v1/checkpoint"), nil, &res); code != http.StatusOK || res.Index == 0 {
					t.Fatalf("checkpoint on %s: status %d index %d", p.name, code, res.Index)
				}
			}
		}
		st, _ := getStatus(t, leader)
		late := c.metaserver(5, "-join", fe1.addr, "-role", "observer")
		// Caught up, and fresh: it has replayed a leader timestamp since
		// the restore (until then it refuses local reads as stale).
		eventually(t, 30*time.Second, "the late observer caught up", func() bool {
			s, ok := getStatus(t, late)
			return ok && s.Applied >= st.Applied && !s.Stale
		})
		s, _ := getStatus(t, late)
		if s.Image == 0 {
			t.Fatalf("late observer status %+v: no image, want a restore from one", s)
		}
		var got nodeView
		if code := call(t, "GET", late.url("/v1/catalog/db1/c99"), nil, &got); code != http.StatusOK || got.Kind != "table" {
			t.Fatalf("late observer GET /db1/c99: status %d %+v", code, got)
		}
	})

	t.Run("SecondProcessOnSameDirFails", func(t *testing.T) {
		p := &proc{t: t, name: "dup", bin: binaries.metaserver, args: []string{"-id", "2", "-dir", fe2.dir, "-addr", freeAddr(t), "-insecure"}, log: &lockedBuffer{}}
		p.start()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.kill()
			t.Fatal("a second metaserver on a locked data dir kept running")
		}
		if p.err == nil || !strings.Contains(strings.ToLower(p.log.String()), "lock") {
			t.Fatalf("second process: err %v, output %q; want a failure naming the lock", p.err, p.log.String())
		}
	})

	t.Run("GracefulShutdown", func(t *testing.T) {
		if err := obs.stop(); err != nil {
			t.Fatalf("SIGTERM: exit %v, want 0", err)
		}
	})
}

func fragmentState(t *testing.T, w *proc, query string) string {
	var frags []fragmentView
	if call(t, "GET", w.url("/v1/fragments"), nil, &frags) != http.StatusOK {
		return ""
	}
	for _, f := range frags {
		if f.Query == query {
			return f.State
		}
	}
	return ""
}
