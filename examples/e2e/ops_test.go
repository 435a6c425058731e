package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// scrapeMetrics reads p's /metrics: each sample's value by its series as
// written (name and labels, e.g. `metatree_cancel_cancelled_total{reason="dead"}`).
func scrapeMetrics(t *testing.T, p *proc) (map[string]float64, bool) {
	t.Helper()
	resp, err := client.Get(p.url("/metrics"))
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, false
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("%s /metrics: malformed line %q", p.name, line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%s /metrics: line %q: %v", p.name, line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err() == nil
}

// metric returns one series of p's /metrics, failing the test if it is
// missing.
func metric(t *testing.T, p *proc, series string) float64 {
	t.Helper()
	m, ok := scrapeMetrics(t, p)
	if !ok {
		t.Fatalf("%s: /metrics unavailable", p.name)
	}
	v, ok := m[series]
	if !ok {
		t.Fatalf("%s: /metrics has no %s", p.name, series)
	}
	return v
}

// readyz returns p's /readyz status and reason.
func readyz(t *testing.T, p *proc) (int, string) {
	var body struct {
		Ready  bool   `json:"ready"`
		Reason string `json:"reason"`
	}
	resp, err := client.Get(p.url("/readyz"))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Reason
}

// frontendSeries are the series every metaserver exports from the start
// (examples/API.md, "Metrics"); histograms by their _count.
var frontendSeries = []string{
	"metatree_journal_has_leader", "metatree_journal_is_leader", "metatree_journal_leader_changes_total",
	"metatree_journal_loop_stalls_total", "metatree_journal_refused_messages_total",
	"metatree_journal_refused_peer_requests_total",
	"metatree_journal_term", "metatree_journal_applied_index", "metatree_journal_committed_index",
	"metatree_journal_stale", "metatree_journal_proposals_applied_total", "metatree_journal_proposals_failed_total",
	"metatree_journal_proposals_forwarded_total", "metatree_journal_wal_fsync_duration_seconds_count",
	"metatree_journal_apply_duration_seconds_count", "metatree_journal_read_barrier_duration_seconds_count",
	"metatree_journal_no_space_alarm", "metatree_journal_disk_free_bytes",
	"metatree_image_last_index", `metatree_image_checkpoints_total{result="ok"}`,
	`metatree_image_checkpoints_total{result="failed"}`, "metatree_image_checkpoint_duration_seconds_count",
	"metatree_image_restores_total",
	`metatree_heartbeat_members{kind="frontend",status="alive"}`, `metatree_heartbeat_members{kind="frontend",status="dead"}`,
	`metatree_heartbeat_members{kind="worker",status="alive"}`, `metatree_heartbeat_members{kind="worker",status="dead"}`,
	"metatree_heartbeat_rtt_seconds_count", "metatree_heartbeat_missed_total",
	"metatree_cancel_live_queries", `metatree_cancel_cancelled_total{reason="restarted"}`,
	`metatree_cancel_cancelled_total{reason="dead"}`, `metatree_cancel_cancelled_total{reason="removed"}`,
	"metatree_catalog_nodes", "go_goroutines", "process_resident_memory_bytes",
}

// TestMetricsFollowTheCluster scrapes /metrics on every node while the
// cluster writes, checkpoints, loses a worker and its leader, and loses
// and regains its quorum; /readyz follows.
func TestMetricsFollowTheCluster(t *testing.T) {
	c := newCluster(t)
	fe1 := c.metaserver(1, "-bootstrap")
	c.waitLeader(15*time.Second, fe1)
	fe2 := c.metaserver(2, "-join", fe1.addr)
	c.waitLeader(20*time.Second, fe1, fe2)
	fe3 := c.metaserver(3, "-join", fe1.addr)
	fes := []*proc{fe1, fe2, fe3}
	c.waitLeader(20*time.Second, fes...)
	w := c.worker(101)
	if code := call(t, "POST", fe1.url("/v1/members"), map[string]any{"id": 101, "addr": w.addr, "kind": "worker"}, nil); code != http.StatusOK {
		t.Fatalf("adding worker 101: status %d", code)
	}
	for _, p := range fes {
		eventually(t, 10*time.Second, p.name+" ready", func() bool { code, _ := readyz(t, p); return code == http.StatusOK })
		m, ok := scrapeMetrics(t, p)
		if !ok {
			t.Fatalf("%s: no /metrics", p.name)
		}
		for _, s := range frontendSeries {
			if _, ok := m[s]; !ok {
				t.Errorf("%s: /metrics has no %s", p.name, s)
			}
		}
	}
	// The worker process may still be starting: its port answers once it
	// serves.
	eventually(t, 10*time.Second, "worker serving /metrics", func() bool { _, ok := scrapeMetrics(t, w); return ok })
	if m, ok := scrapeMetrics(t, w); !ok || m[`metatree_cancel_cancelled_total{reason="restarted"}`] != 0 || m["metatree_cancel_live_queries"] != 0 {
		t.Fatalf("worker /metrics: %v (ok %v)", m, ok)
	}
	if resp, err := client.Get(w.url("/livez")); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("worker /livez: %v", err)
	} else {
		resp.Body.Close()
	}

	t.Run("WritesRaiseCommittedAndApplied", func(t *testing.T) {
		before := map[*proc]float64{}
		for _, p := range fes {
			before[p] = metric(t, p, "metatree_journal_applied_index")
		}
		for i := range 5 {
			if code := call(t, "PUT", fe2.url(fmt.Sprintf("/v1/catalog/m%d", i)), map[string]any{"kind": "x"}, nil); code != http.StatusOK {
				t.Fatalf("PUT %d: status %d", i, code)
			}
		}
		for _, p := range fes {
			eventually(t, 5*time.Second, p.name+" applied the writes", func() bool {
				return metric(t, p, "metatree_journal_applied_index") >= before[p]+5 &&
					metric(t, p, "metatree_journal_committed_index") >= before[p]+5
			})
		}
		if n := metric(t, fe2, "metatree_catalog_nodes"); n < 6 {
			t.Fatalf("fe2 metatree_catalog_nodes = %v, want >= 6", n)
		}
	})

	t.Run("CheckpointRaisesImageIndex", func(t *testing.T) {
		leader := c.waitLeader(10*time.Second, fes...)
		follower := fe2
		if follower == leader {
			follower = fe3
		}
		var res struct {
			Index uint64 `json:"index"`
		}
		if code := call(t, "POST", follower.url("/v1/checkpoint"), nil, &res); code != http.StatusOK || res.Index == 0 {
			t.Fatalf("checkpoint: status %d, %+v", code, res)
		}
		if got := metric(t, follower, "metatree_image_last_index"); got < float64(res.Index) {
			t.Fatalf("metatree_image_last_index = %v after a checkpoint at %d", got, res.Index)
		}
		if got := metric(t, follower, `metatree_image_checkpoints_total{result="ok"}`); got < 1 {
			t.Fatalf(`checkpoints_total{result="ok"} = %v`, got)
		}
	})

	t.Run("WorkerRestartCountsRestartAndCancellation", func(t *testing.T) {
		coord := fe3
		eventually(t, 10*time.Second, "worker 101's epoch known to "+coord.name, func() bool {
			var ms []memberView
			if call(t, "GET", coord.url("/v1/members"), nil, &ms) != http.StatusOK {
				return false
			}
			for _, m := range ms {
				if m.ID == 101 && m.Status == "alive" && m.Epoch != "" {
					return true
				}
			}
			return false
		})
		before := metric(t, coord, `metatree_cancel_cancelled_total{reason="restarted"}`)
		restarts := metric(t, coord, `metatree_heartbeat_events_total{type="restarted"}`)
		body := map[string]any{"id": "q-metrics", "workers": []int{101}, "duration_ms": 120000}
		if code := call(t, "POST", coord.url("/v1/queries"), body, nil); code != http.StatusOK {
			t.Fatalf("query: status %d", code)
		}
		if got := metric(t, coord, "metatree_cancel_live_queries"); got != 1 {
			t.Fatalf("live queries = %v, want 1", got)
		}
		w.kill()
		w.start()
		eventually(t, 15*time.Second, "the restart counted and the query cancelled", func() bool {
			return metric(t, coord, `metatree_cancel_cancelled_total{reason="restarted"}`) == before+1 &&
				metric(t, coord, `metatree_heartbeat_events_total{type="restarted"}`) == restarts+1 &&
				metric(t, coord, "metatree_cancel_live_queries") == 0
		})
	})

	t.Run("LeaderKillRaisesLeaderChangesAndTerm", func(t *testing.T) {
		leader := c.waitLeader(10*time.Second, fes...)
		var rest []*proc
		for _, p := range fes {
			if p != leader {
				rest = append(rest, p)
			}
		}
		changes, terms := map[*proc]float64{}, map[*proc]float64{}
		for _, p := range rest {
			changes[p] = metric(t, p, "metatree_journal_leader_changes_total")
			terms[p] = metric(t, p, "metatree_journal_term")
		}
		leader.kill()
		c.waitLeader(20*time.Second, rest...)
		for _, p := range rest {
			eventually(t, 10*time.Second, p.name+" saw the new leader", func() bool {
				return metric(t, p, "metatree_journal_has_leader") == 1 &&
					metric(t, p, "metatree_journal_leader_changes_total") > changes[p] &&
					metric(t, p, "metatree_journal_term") > terms[p]
			})
		}
		c.restart(leader)
		c.waitLeader(20*time.Second, fes...)
	})

	t.Run("ReadyzFollowsQuorumAndStaleness", func(t *testing.T) {
		survivor := fe1
		others := []*proc{fe2, fe3}
		for _, p := range others {
			p.kill()
		}
		eventually(t, 20*time.Second, "the survivor stale and without a leader, not ready", func() bool {
			code, reason := readyz(t, survivor)
			return code == http.StatusServiceUnavailable && (strings.Contains(reason, "no leader") || strings.Contains(reason, "stale")) &&
				metric(t, survivor, "metatree_journal_has_leader") == 0 && metric(t, survivor, "metatree_journal_stale") == 1
		})
		code, reason := readyz(t, survivor)
		t.Logf("survivor /readyz without quorum: %d %q", code, reason)
		for _, p := range others {
			c.restart(p)
		}
		eventually(t, 30*time.Second, "every frontend ready again", func() bool {
			for _, p := range fes {
				if code, _ := readyz(t, p); code != http.StatusOK {
					return false
				}
			}
			return metric(t, survivor, "metatree_journal_stale") == 0 && metric(t, survivor, "metatree_journal_has_leader") == 1
		})
	})
}

// TestRollingRestart restarts each of three metaservers in turn with
// SIGTERM, the leader included, while a client writes every 5 ms through a
// follower: no write fails, and the longest write during the leader's
// restart stays under 500 ms.
func TestRollingRestart(t *testing.T) {
	c := newCluster(t)
	fe1 := c.metaserver(1, "-bootstrap")
	c.waitLeader(15*time.Second, fe1)
	fe2 := c.metaserver(2, "-join", fe1.addr)
	c.waitLeader(20*time.Second, fe1, fe2)
	fe3 := c.metaserver(3, "-join", fe1.addr)
	fes := []*proc{fe1, fe2, fe3}
	c.waitLeader(20*time.Second, fes...)
	for _, p := range fes {
		eventually(t, 10*time.Second, p.name+" ready", func() bool { code, _ := readyz(t, p); return code == http.StatusOK })
	}

	var target atomic.Pointer[proc]
	var (
		mu       sync.Mutex
		failures []string
		longest  time.Duration // in the current phase
		writes   int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			p := target.Load()
			if p == nil {
				continue // the first phase has not picked its follower yet
			}
			var e apiError
			t0 := time.Now()
			code := call(t, "PUT", p.url(fmt.Sprintf("/v1/catalog/r%d", i)), map[string]any{"kind": "x"}, &e)
			d := time.Since(t0)
			mu.Lock()
			writes++
			longest = max(longest, d)
			if code != http.StatusOK {
				failures = append(failures, fmt.Sprintf("write %d through %s: status %d %s %s", i, p.name, code, e.Error, e.Message))
			}
			mu.Unlock()
		}
	})

	var leaderLongest time.Duration
	leaderRestarted := false
	for _, p := range fes {
		leader := c.waitLeader(20*time.Second, fes...)
		// Write through a follower that stays up.
		for _, q := range fes {
			if q != p && q != leader {
				target.Store(q)
				break
			}
		}
		mu.Lock()
		longest = 0
		mu.Unlock()
		wasLeader := p == leader
		if err := p.stop(); err != nil {
			t.Fatalf("%s did not exit cleanly on SIGTERM: %v", p.name, err)
		}
		c.restart(p)
		eventually(t, 30*time.Second, p.name+" ready after its restart", func() bool {
			code, _ := readyz(t, p)
			return code == http.StatusOK
		})
		mu.Lock()
		phase := longest
		mu.Unlock()
		t.Logf("restarted %s (leader: %v): longest write meanwhile %v", p.name, wasLeader, phase)
		if wasLeader {
			leaderRestarted, leaderLongest = true, max(leaderLongest, phase)
		}
	}
	close(stop)
	wg.Wait()
	if !leaderRestarted {
		t.Fatal("the leader was never among the restarted servers")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Fatalf("%d of %d writes failed during the rolling restart, first: %s", len(failures), writes, failures[0])
	}
	t.Logf("%d writes, none failed; longest write during the leader's restart: %v (BenchmarkHandoff measures the hand-off)", writes, leaderLongest)
	requireNoFalseAlarm(t, fes...)
}

// TestMemberViewPromoteAndLeader: the member view carries the leader's
// figures on any node; an observer that lags is refused promotion with 409
// not_caught_up and promoted once caught up; POST /v1/leader moves the
// leadership.
func TestMemberViewPromoteAndLeader(t *testing.T) {
	c := newCluster(t)
	fe1 := c.metaserver(1, "-bootstrap", "-promote-max-lag", "20")
	c.waitLeader(15*time.Second, fe1)
	fe2 := c.metaserver(2, "-join", fe1.addr, "-promote-max-lag", "20")
	c.waitLeader(20*time.Second, fe1, fe2)
	obs := c.metaserver(3, "-join", fe1.addr, "-role", "observer", "-promote-max-lag", "20")
	all := []*proc{fe1, fe2, obs}
	leader := c.waitLeader(20*time.Second, all...)
	follower := fe2
	if leader == fe2 {
		follower = fe1
	}

	type entry struct {
		ID              uint64  `json:"id"`
		Role            string  `json:"role"`
		Applied         *uint64 `json:"applied"`
		Lag             *uint64 `json:"lag"`
		LastHeartbeatMS *int64  `json:"last_heartbeat_ms"`
		Version         string  `json:"version"`
	}
	eventually(t, 10*time.Second, "the leader's figures in the member view of a follower", func() bool {
		var ms []entry
		if call(t, "GET", follower.url("/v1/members"), nil, &ms) != http.StatusOK || len(ms) != 3 {
			return false
		}
		for _, m := range ms {
			if m.Applied == nil || m.Lag == nil || m.LastHeartbeatMS == nil || m.Version == "" {
				return false
			}
		}
		return true
	})

	// A paused observer falls behind: promotion is refused.
	obs.pause(true)
	for i := range 30 {
		if code := call(t, "PUT", follower.url(fmt.Sprintf("/v1/catalog/p%d", i)), map[string]any{"kind": "x"}, nil); code != http.StatusOK {
			t.Fatalf("PUT %d: status %d", i, code)
		}
	}
	var e apiError
	if code := call(t, "POST", follower.url("/v1/members/3/promote"), nil, &e); code != http.StatusConflict || e.Error != "not_caught_up" {
		t.Fatalf("promoting a lagging observer: status %d %+v, want 409 not_caught_up", code, e)
	}
	obs.pause(false)
	eventually(t, 15*time.Second, "the observer promoted once caught up", func() bool {
		return call(t, "POST", follower.url("/v1/members/3/promote"), nil, nil) == http.StatusOK
	})
	var ms []entry
	if call(t, "GET", leader.url("/v1/members"), nil, &ms); len(ms) != 3 {
		t.Fatalf("members: %+v", ms)
	}
	for _, m := range ms {
		if m.ID == 3 && m.Role != "follower" {
			t.Fatalf("member 3 has role %q after its promotion", m.Role)
		}
	}

	// Leadership moves on request, asked through a non-leader.
	var res struct {
		Leader uint64 `json:"leader"`
	}
	if code := call(t, "POST", follower.url("/v1/leader"), map[string]any{"id": 3}, &res); code != http.StatusOK || res.Leader != 3 {
		t.Fatalf("POST /v1/leader: status %d %+v", code, res)
	}
	if st, _ := getStatus(t, obs); st.State != "leader" {
		t.Fatalf("after POST /v1/leader node 3 is %q", st.State)
	}
	if code := call(t, "POST", fe1.url("/v1/leader"), map[string]any{"id": 9}, &e); code != http.StatusBadRequest {
		t.Fatalf("POST /v1/leader to a non-member: status %d", code)
	}
}
